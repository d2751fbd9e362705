// An LD_PRELOAD shim that records what glibc's malloc does with the large host temporaries of a
// real training step: every block of at least DSPLAN_MALLOC_MIN bytes (default 1 MiB) that
// malloc or posix_memalign hands out (PyTorch's CPU allocator uses posix_memalign) is logged when
// it is freed, with the thread, its size, glibc's chunk flags (mmapped, from a per-thread arena),
// its address, how long it lived and how many minor page faults that thread took while it lived.
// A pageable copy target (ZeRO-3's offloaded gradient copy: `partition_grads`' blocking
// bf16 CUDA -> fp32 CPU copy_, whose bf16 temporary the D2H copy writes on the allocating thread)
// that faults as many pages as it has came from fresh memory; one that faults none reused pages.
//
// Why: docs/validation/deepspeed/offphase-1206 found opt-1.3b's 8 MiB temporaries faulting every
// step where glibc's rules, replayed alone (tools/dev/cast_copy_malloc_replay.py), keep them on
// the heap, and gemma-2b's 8 MiB ones did not. The flags tell which path makes them fresh: an
// mmapped chunk (the dynamic mmap threshold), or a per-thread arena's sub-heap that is deleted
// when it empties (glibc arena.c heap_trim) or trimmed.
//
// Build: gcc -O2 -shared -fPIC tools/device/malloc_trace.c -o /tmp/malloc_trace.so
// Use:   LD_PRELOAD=/tmp/malloc_trace.so python3 ...   (logs to $OUT/malloc-trace/PID.tsv, else
//        /tmp/malloc-trace/PID.tsv; a header line names the columns)
// Read:  python3 tools/device/malloc_trace_table.py FILE...
//
// It calls glibc's exported __libc_malloc / __libc_memalign / __libc_free, so it needs no dlsym
// (which may allocate). Calls below the threshold cost one comparison.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern void* __libc_malloc(size_t);
extern void* __libc_memalign(size_t, size_t);
extern void __libc_free(void*);

enum { kSlots = 1 << 16, kBuf = 1 << 20, kMaxLines = 4000000 };

struct Slot {
  uintptr_t ptr;  // 0: empty; 1: deleted
  size_t size;
  long tid;
  long faults;
  int64_t ns;
};

static struct Slot slots[kSlots];
static atomic_flag lock = ATOMIC_FLAG_INIT;
static size_t min_bytes = 0;  // 0: not read yet
static int fd = -1;
static char buf[kBuf];
static size_t used = 0;
static long lines = 0;

static void Lock(void) {
  while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) {
  }
}
static void Unlock(void) { atomic_flag_clear_explicit(&lock, memory_order_release); }

static long Faults(void) {
  struct rusage r;
  return getrusage(RUSAGE_THREAD, &r) == 0 ? r.ru_minflt : -1;
}
static int64_t Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}
static long Tid(void) { return (long)syscall(SYS_gettid); }

static size_t MinBytes(void) {
  if (min_bytes == 0) {
    const char* e = getenv("DSPLAN_MALLOC_MIN");
    long long v = e ? atoll(e) : 0;
    min_bytes = v > 0 ? (size_t)v : (size_t)1 << 20;
  }
  return min_bytes;
}

// Under the lock.
static void Flush(void) {
  if (fd >= 0 && used > 0) {
    size_t off = 0;
    while (off < used) {
      ssize_t w = write(fd, buf + off, used - off);
      if (w <= 0) break;
      off += (size_t)w;
    }
  }
  used = 0;
}

static void OpenLog(void) {
  if (fd != -1) return;
  fd = -2;  // tried
  const char* out = getenv("OUT");
  char dir[3072], path[3200];
  const char* base = out && *out ? out : "/tmp";
  mkdir(base, 0755);
  snprintf(dir, sizeof dir, "%s/malloc-trace", base);
  mkdir(dir, 0755);
  snprintf(path, sizeof path, "%s/%ld.tsv", dir, (long)getpid());
  int f = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f < 0) return;
  fd = f;
  used = (size_t)snprintf(buf, kBuf,
                          "# tid\tbytes\tmmapped\tthread_arena\taddress\tlife_us\tfaults\t"
                          "min_bytes=%zu\n",
                          MinBytes());
}

static size_t Hash(uintptr_t p) { return (size_t)((p >> 4) * 0x9E3779B97F4A7C15ull) & (kSlots - 1); }

static void Track(void* p, size_t size) {
  if (!p || size < MinBytes()) return;
  const long f = Faults();
  const int64_t t = Now();
  const long tid = Tid();
  Lock();
  size_t i = Hash((uintptr_t)p);
  for (size_t n = 0; n < kSlots; ++n, i = (i + 1) & (kSlots - 1)) {
    if (slots[i].ptr <= 1) {
      slots[i] = (struct Slot){(uintptr_t)p, size, tid, f, t};
      break;
    }
  }
  Unlock();
}

// Before the real free: the chunk header is still the allocator's.
static void Untrack(void* p) {
  if (!p) return;
  Lock();
  size_t i = Hash((uintptr_t)p);
  struct Slot s = {0};
  for (size_t n = 0; n < kSlots; ++n, i = (i + 1) & (kSlots - 1)) {
    if (slots[i].ptr == 0) break;
    if (slots[i].ptr == (uintptr_t)p) {
      s = slots[i];
      slots[i].ptr = 1;
      break;
    }
  }
  Unlock();
  if (s.ptr == 0) return;
  const size_t header = ((size_t*)p)[-1];
  const long tid = Tid();
  const long faults = tid == s.tid ? Faults() - s.faults : -1;
  const int64_t life = Now() - s.ns;
  Lock();
  OpenLog();
  if (fd >= 0 && lines < kMaxLines) {
    if (used + 256 > kBuf) Flush();
    used += (size_t)snprintf(buf + used, kBuf - used, "%ld\t%zu\t%d\t%d\t%#lx\t%lld\t%ld\n",
                             s.tid, s.size, (int)((header >> 1) & 1), (int)((header >> 2) & 1),
                             (unsigned long)p, (long long)(life / 1000), faults);
    ++lines;
  }
  Unlock();
}

void* malloc(size_t size) {
  void* p = __libc_malloc(size);
  if (size >= (min_bytes ? min_bytes : MinBytes())) Track(p, size);
  return p;
}

int posix_memalign(void** out, size_t alignment, size_t size) {
  if (alignment < sizeof(void*) || (alignment & (alignment - 1)) != 0) return EINVAL;
  void* p = __libc_memalign(alignment, size);
  if (!p && size != 0) return ENOMEM;
  *out = p;
  if (size >= (min_bytes ? min_bytes : MinBytes())) Track(p, size);
  return 0;
}

void free(void* p) {
  // Only a chunk at least the threshold's size can be tracked: its header says (glibc keeps the
  // chunk size, flags in the low three bits, in the word before every block it hands out).
  if (p && (((size_t*)p)[-1] & ~(size_t)7) >= (min_bytes ? min_bytes : MinBytes())) Untrack(p);
  __libc_free(p);
}

__attribute__((destructor)) static void Finish(void) {
  Lock();
  Flush();
  Unlock();
}
