// The one collective formula table (docs/simulator.md, "Time"), shared by the cost model, the
// profiler's fits and the validation report.
//
// Size convention (nccl-tests): S is the bytes of the full, unsharded buffer: the all-reduce
// buffer, the all-gather output, the reduce-scatter input. algbw = S / t; busbw = algbw * factor,
// where the factor makes busbw comparable to the link bandwidth a ring achieves. GB/s = 1e9 B/s.
#ifndef DSPLAN_CORE_COLLECTIVES_H_
#define DSPLAN_CORE_COLLECTIVES_H_

#include <cstdint>

namespace dsplan {

enum class Collective { kAllReduce, kReduceScatter, kAllGather, kAllToAll, kBroadcast, kReduce,
                        kSendRecv };

const char* CollectiveName(Collective c);

/// busbw / algbw for |n| ranks: 2(n-1)/n for all-reduce; (n-1)/n for reduce-scatter, all-gather
/// and all-to-all; 1 for broadcast, reduce and send/recv. REQUIRES: n >= 1 (n == 1 gives 0 for
/// the sharded collectives: nothing crosses a link).
double BusFactor(Collective c, int n);

/// Seconds for one collective of |bytes| (S as above) on |n| ranks, given a latency |alpha_s|
/// and a bus bandwidth |busbw_bytes_per_s|: alpha + S * factor / busbw. Zero for n == 1.
double CollectiveSeconds(Collective c, int n, double bytes, double alpha_s,
                         double busbw_bytes_per_s);

/// Bus bandwidth (bytes/s) implied by a measured time: S / t * factor.
double BusBandwidth(Collective c, int n, double bytes, double seconds);

}  // namespace dsplan

#endif  // DSPLAN_CORE_COLLECTIVES_H_
