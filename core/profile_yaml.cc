// HardwareProfile and NodeProfile YAML reading and writing (format: docs/profile-format.md).
//
// The reader is strict: every mapping lists its keys, and an unknown key, a missing required
// key, a value of the wrong type or with the wrong unit is an InvalidArgument naming the file,
// the dotted key path and the line. yaml-cpp exceptions never leave this file.
#include "core/profile_yaml.h"

#include "core/output_file.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/model_catalog.h"
#include "core/text.h"
#include "core/units.h"

namespace dsplan {
namespace {

namespace fs = std::filesystem;

// What a number means, so that its unit can be checked.
enum class Unit {
  kBytes,      // sizes: 4096, "141GB", "80GiB"
  kBytesPerS,  // bandwidths: 4.8e12, "4.8TB/s", "25 GiB/s"
  kFlopsPerS,  // 989.4e12, "989.4 TFLOP/s"
  kSeconds,    // 1e-5, "10us", "5 ms"
  kFraction,   // a plain number in [0, 1]
  kRate,       // a plain number (elements/s)
};

const char* UnitHelp(Unit u) {
  switch (u) {
    case Unit::kBytes: return "a size in bytes, e.g. 141GB, 80GiB or 4096";
    case Unit::kBytesPerS: return "a bandwidth in bytes/s, e.g. 4.8TB/s, 25 GiB/s or 4.8e12";
    case Unit::kFlopsPerS: return "a rate in FLOP/s, e.g. 989.4 TFLOP/s or 989.4e12";
    case Unit::kSeconds: return "a time in seconds, e.g. 10us, 5 ms or 1e-5";
    case Unit::kFraction: return "a plain number between 0 and 1";
    case Unit::kRate: return "a plain number";
  }
  return "?";
}

// One scalar of the document as the reader checks it: its text (when it is a scalar; a null,
// list or mapping is not) and its 0-based line (-1: unknown). Rows of the GEMM tables come as
// cells either from yaml-cpp nodes or from the fast row scanner below, so both are checked by
// the same code with the same messages.
struct Cell {
  bool scalar = false;
  std::string text;
  int line = -1;

  static Cell Of(const YAML::Node& n) {
    Cell c;
    c.scalar = n.IsScalar();
    if (c.scalar) c.text = n.Scalar();
    c.line = n.IsDefined() && n.Mark().line >= 0 ? n.Mark().line : -1;
    return c;
  }
};

// One row of a GEMM table: a flow list of cells (|list| false: the row is not a list).
struct Row {
  bool list = false;
  int line = -1;
  std::vector<Cell> cells;

  static Row Of(const YAML::Node& n) {
    Row r;
    r.list = n.IsSequence();
    r.line = n.IsDefined() && n.Mark().line >= 0 ? n.Mark().line : -1;
    if (r.list) {
      r.cells.reserve(n.size());
      for (size_t i = 0; i < n.size(); ++i) r.cells.push_back(Cell::Of(n[i]));
    }
    return r;
  }
};

// Reading context: the file and the dotted path of the current node.
class Reader {
 public:
  explicit Reader(std::string file) : file_(std::move(file)) {}

  Status Error(const YAML::Node& n, const std::string& key, const std::string& msg) const {
    return ErrorAt(LineOf(n), key, msg);
  }
  // |line|: 0-based, or -1 when unknown.
  Status ErrorAt(int line, const std::string& key, const std::string& msg) const {
    std::string where = file_;
    if (line >= 0) where += fmt::format(":{}", line + 1);
    return Status::InvalidArgument(fmt::format("{}: {}: {}", where, key, msg));
  }
  static int LineOf(const YAML::Node& n) {
    return n.IsDefined() && n.Mark().line >= 0 ? n.Mark().line : -1;
  }

  // Checks that |n| is a mapping whose keys are all in |allowed|.
  Status CheckMap(const YAML::Node& n, const std::string& key,
                  std::initializer_list<const char*> allowed) const {
    if (!n.IsMap()) return Error(n, key, "expected a mapping");
    for (const auto& kv : n) {
      if (!kv.first.IsScalar()) return Error(kv.first, key, "a key is a list or mapping");
      const std::string k = kv.first.Scalar();
      bool ok = false;
      for (const char* a : allowed) ok = ok || k == a;
      if (!ok) {
        std::string valid;
        for (const char* a : allowed) valid += (valid.empty() ? "" : ", ") + std::string(a);
        return Error(kv.first, Join(key, Escape(k)),
                     fmt::format("unknown key (valid here: {})", valid));
      }
    }
    return Status();
  }

  Result<YAML::Node> Required(const YAML::Node& map, const std::string& key,
                              const char* child) const {
    YAML::Node n = map[child];
    if (!n.IsDefined() || n.IsNull()) {
      return Error(map, Join(key, child), "missing (required)");
    }
    return n;
  }

  Result<std::string> String(const YAML::Node& n, const std::string& key) const {
    return String(Cell::Of(n), key);
  }
  Result<std::string> String(const Cell& c, const std::string& key) const {
    if (!c.scalar) return ErrorAt(c.line, key, "expected a string");
    if (!IsValidUtf8(c.text)) {
      return ErrorAt(c.line, key, fmt::format("{} is not valid UTF-8", Quote(c.text)));
    }
    return c.text;
  }

  Result<int64_t> Int(const YAML::Node& n, const std::string& key, int64_t min,
                      int64_t max = int64_t{1} << 40) const {
    return Int(Cell::Of(n), key, min, max);
  }
  Result<int64_t> Int(const Cell& c, const std::string& key, int64_t min,
                      int64_t max = int64_t{1} << 40) const {
    if (!c.scalar) return ErrorAt(c.line, key, "expected an integer");
    const std::string& s = c.text;
    char* end = nullptr;
    errno = 0;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno != 0) {
      return ErrorAt(c.line, key, fmt::format("expected an integer, got {}", Quote(s)));
    }
    if (v < min) return ErrorAt(c.line, key, fmt::format("must be at least {}, got {}", min, v));
    if (v > max) return ErrorAt(c.line, key, fmt::format("must be at most {}, got {}", max, v));
    return static_cast<int64_t>(v);
  }

  Result<bool> Bool(const YAML::Node& n, const std::string& key) const {
    if (n.IsScalar() && (n.Scalar() == "true" || n.Scalar() == "false")) {
      return n.Scalar() == "true";
    }
    return Error(n, key, "expected true or false");
  }

  // A value with an optional unit suffix (see Unit), converted to the base unit.
  Result<double> Value(const YAML::Node& n, const std::string& key, Unit unit) const {
    return Value(Cell::Of(n), key, unit);
  }
  Result<double> Value(const Cell& n, const std::string& key, Unit unit) const {
    if (!n.scalar) return ErrorAt(n.line, key, fmt::format("expected {}", UnitHelp(unit)));
    const std::string& text = n.text;
    const char* begin = text.c_str();
    char* end = nullptr;
    double v = std::strtod(begin, &end);
    if (end == begin || !std::isfinite(v)) {
      return ErrorAt(n.line, key,
                   fmt::format("{} is not a number; expected {}", Quote(text), UnitHelp(unit)));
    }
    std::string suffix(end);
    suffix.erase(0, suffix.find_first_not_of(' '));
    if (v < 0) return ErrorAt(n.line, key, fmt::format("{} is negative", Quote(text)));
    if (suffix.empty()) {
      if (unit == Unit::kFraction && v > 1) {
        return ErrorAt(n.line, key, fmt::format("{} is not a fraction between 0 and 1", Quote(text)));
      }
      return v;
    }
    auto wrong = [&]() {
      return ErrorAt(n.line, key,
                   fmt::format("{} has the wrong unit for this key; expected {}", Quote(text),
                               UnitHelp(unit)));
    };
    std::string upper;
    for (char c : suffix) upper += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    switch (unit) {
      case Unit::kBytes: {
        if (upper.find("/S") != std::string::npos || upper.find("FLOP") != std::string::npos) {
          return wrong();
        }
        auto size = ParseSize(text, key);
        if (!size.ok()) return ErrorAt(n.line, key, size.status().message());
        return static_cast<double>(*size);
      }
      case Unit::kBytesPerS: {
        if (upper.size() < 2 || upper.substr(upper.size() - 2) != "/S" ||
            upper.find("FLOP") != std::string::npos) {
          return wrong();
        }
        std::string size_text = text.substr(0, text.size() - 2);
        // Bandwidths may be fractional bytes/s in principle; ParseSize rounds to whole bytes,
        // which is far below any bandwidth's precision.
        auto size = ParseSize(size_text, key);
        if (!size.ok()) return ErrorAt(n.line, key, size.status().message() + " (before '/s')");
        return static_cast<double>(*size);
      }
      case Unit::kFlopsPerS: {
        static const std::map<std::string, double> kMult = {
            {"FLOP/S", 1},     {"KFLOP/S", 1e3},  {"MFLOP/S", 1e6}, {"GFLOP/S", 1e9},
            {"TFLOP/S", 1e12}, {"PFLOP/S", 1e15}, {"FLOPS", 1},     {"GFLOPS", 1e9},
            {"TFLOPS", 1e12},  {"PFLOPS", 1e15}};
        auto it = kMult.find(upper);
        if (it == kMult.end()) return wrong();
        return v * it->second;
      }
      case Unit::kSeconds: {
        static const std::map<std::string, double> kMult = {
            {"S", 1}, {"MS", 1e-3}, {"US", 1e-6}, {"NS", 1e-9}};
        auto it = kMult.find(upper);
        if (it == kMult.end()) return wrong();
        return v * it->second;
      }
      case Unit::kFraction:
      case Unit::kRate:
        return wrong();
    }
    return wrong();
  }

  // A source: a mapping with exactly one of datasheet / measured / assumption.
  Result<Source> SourceOf(const YAML::Node& n, const std::string& key,
                          std::initializer_list<const char*> extra_keys = {}) const {
    Source s;
    int found = 0;
    for (SourceKind k : {SourceKind::kDatasheet, SourceKind::kMeasured, SourceKind::kAssumption}) {
      YAML::Node d = n[SourceKindName(k)];
      if (!d.IsDefined()) continue;
      ++found;
      DSPLAN_ASSIGN_OR_RETURN(s.detail, String(d, Join(key, SourceKindName(k))));
      if (s.detail.empty()) {
        return Error(d, Join(key, SourceKindName(k)),
                     "must say where the number comes from (a reference or a method)");
      }
      s.kind = k;
    }
    if (found != 1) {
      return Error(n, key,
                   found == 0 ? "missing its source: add one of datasheet: \"<reference>\", "
                                "measured: \"<method>\" or assumption: \"<basis>\""
                              : "has more than one source key; keep exactly one of datasheet, "
                                "measured, assumption");
    }
    return s;
  }

  // A Number: {value: V, <source kind>: "detail"}.
  Result<Number> NumberOf(const YAML::Node& map, const std::string& key, const char* child,
                          Unit unit) const {
    const std::string path = Join(key, child);
    DSPLAN_ASSIGN_OR_RETURN(YAML::Node n, Required(map, key, child));
    if (!n.IsMap()) {
      return Error(n, path,
                   "expected a mapping {value: ..., datasheet|measured|assumption: \"...\"}");
    }
    DSPLAN_RETURN_IF_ERROR(CheckMap(n, path, {"value", "datasheet", "measured", "assumption"}));
    Number out;
    DSPLAN_ASSIGN_OR_RETURN(YAML::Node v, Required(n, path, "value"));
    DSPLAN_ASSIGN_OR_RETURN(out.value, Value(v, Join(path, "value"), unit));
    DSPLAN_ASSIGN_OR_RETURN(out.source, SourceOf(n, path));
    return out;
  }

  // A flow sequence of |arity| elements at |n|.
  Status Tuple(const YAML::Node& n, const std::string& key, size_t arity,
               const char* shape) const {
    if (!n.IsSequence() || n.size() != arity) {
      return Error(n, key, fmt::format("expected a list {}", shape));
    }
    return Status();
  }

  static std::string Join(const std::string& a, const std::string& b) {
    return a.empty() ? b : a + "." + b;
  }

 private:
  std::string file_;
};

Result<std::vector<BandwidthPoint>> ReadPoints(const Reader& r, const YAML::Node& map,
                                               const std::string& key) {
  std::vector<BandwidthPoint> out;
  YAML::Node n = map["points"];
  if (!n.IsDefined() || n.IsNull()) return out;
  const std::string path = Reader::Join(key, "points");
  if (!n.IsSequence()) return r.Error(n, path, "expected a list of [bytes, bytes_per_s]");
  for (size_t i = 0; i < n.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", path, i);
    DSPLAN_RETURN_IF_ERROR(r.Tuple(n[i], p, 2, "[bytes, bytes_per_s]"));
    BandwidthPoint bp;
    DSPLAN_ASSIGN_OR_RETURN(bp.bytes, r.Value(n[i][0], p + "[0]", Unit::kBytes));
    DSPLAN_ASSIGN_OR_RETURN(bp.bytes_per_s, r.Value(n[i][1], p + "[1]", Unit::kBytesPerS));
    out.push_back(bp);
  }
  return out;
}

Result<CopyCurve> ReadCopy(const Reader& r, const YAML::Node& links, const char* child) {
  const std::string key = Reader::Join("links", child);
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node n, r.Required(links, "links", child));
  DSPLAN_RETURN_IF_ERROR(r.CheckMap(n, key, {"latency_s", "bytes_per_s", "points"}));
  CopyCurve c;
  DSPLAN_ASSIGN_OR_RETURN(c.latency_s, r.NumberOf(n, key, "latency_s", Unit::kSeconds));
  DSPLAN_ASSIGN_OR_RETURN(c.bytes_per_s, r.NumberOf(n, key, "bytes_per_s", Unit::kBytesPerS));
  DSPLAN_ASSIGN_OR_RETURN(c.points, ReadPoints(r, n, key));
  return c;
}

Result<Collective> ParseCollective(const std::string& s) {
  for (Collective c : {Collective::kAllReduce, Collective::kReduceScatter, Collective::kAllGather,
                       Collective::kAllToAll, Collective::kBroadcast, Collective::kReduce,
                       Collective::kSendRecv}) {
    if (s == CollectiveName(c)) return c;
  }
  return Status::InvalidArgument(fmt::format(
      "unknown collective {} (valid: all_reduce, reduce_scatter, all_gather, all_to_all, "
      "broadcast, reduce, send_recv)",
      Quote(s)));
}

// gpu.attention: [dtype, head_dim, causal, seq, batch_heads, fwd_flops_per_s, bwd_flops_per_s]
// rows, and gpu.attention_source (required with rows).
// The source of the table gpu.|table| (gpu.|table|_source): required when the table has rows.
Status ReadTableSource(const Reader& r, const YAML::Node& gpu, const std::string& table,
                       bool has_rows, const char* what, Source* out) {
  const std::string key = table + "_source";
  const YAML::Node s = gpu[key];
  if (s.IsDefined() && !s.IsNull()) {
    DSPLAN_RETURN_IF_ERROR(r.CheckMap(s, "gpu." + key, {"datasheet", "measured", "assumption"}));
    DSPLAN_ASSIGN_OR_RETURN(*out, r.SourceOf(s, "gpu." + key));
  } else if (has_rows) {
    return r.Error(gpu, "gpu." + key,
                   fmt::format("missing: a {} needs its source (the method)", what));
  }
  return Status();
}

// gpu.|table|: rows [x, y] in ascending x, read into Point{x, y}; |check| names what is wrong
// with a row's values ("" when they are valid).
template <class Point>
Status ReadPairTable(const Reader& r, const YAML::Node& gpu, const std::string& table,
                     const char* shape, Unit ux, Unit uy, const char* x_name,
                     std::string (*check)(double, double), std::vector<Point>* out) {
  const YAML::Node t = gpu[table];
  if (!t.IsDefined() || t.IsNull()) return Status();
  const std::string key = "gpu." + table;
  if (!t.IsSequence()) return r.Error(t, key, "expected a list");
  double last = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const std::string p = fmt::format("{}[{}]", key, i);
    DSPLAN_RETURN_IF_ERROR(r.Tuple(t[i], p, 2, shape));
    DSPLAN_ASSIGN_OR_RETURN(const double x, r.Value(t[i][0], p + "[0]", ux));
    DSPLAN_ASSIGN_OR_RETURN(const double y, r.Value(t[i][1], p + "[1]", uy));
    if (const std::string why = check(x, y); !why.empty()) return r.Error(t[i], p, why);
    if (i > 0 && x <= last) {
      return r.Error(t[i], p, fmt::format("points must be in ascending order of {}", x_name));
    }
    last = x;
    out->push_back(Point{x, y});
  }
  return Status();
}

// gpu.|table| (attention, sdpa): rows [dtype, head_dim, causal, seq, batch_heads,
// fwd_flops_per_s, bwd_flops_per_s], and gpu.|table|_source (required with rows).
Status ReadAttentionTable(const Reader& r, const YAML::Node& n, const std::string& table,
                          std::vector<AttentionPoint>* out, Source* source) {
  const std::string key = "gpu." + table;
  YAML::Node at = n[table];
  if (at.IsDefined() && !at.IsNull()) {
    if (!at.IsSequence()) return r.Error(at, key, "expected a list");
    std::set<std::tuple<int, int64_t, int, int64_t, int64_t>> seen;
    for (size_t i = 0; i < at.size(); ++i) {
      const std::string p = fmt::format("{}[{}]", key, i);
      DSPLAN_RETURN_IF_ERROR(r.Tuple(at[i], p, 7,
                                     "[dtype, head_dim, causal, seq, batch_heads, "
                                     "fwd_flops_per_s, bwd_flops_per_s]"));
      AttentionPoint pt;
      DSPLAN_ASSIGN_OR_RETURN(std::string dtype, r.String(at[i][0], p + "[0]"));
      auto prec = ParsePrecision(dtype);
      if (!prec.ok()) return r.Error(at[i][0], p + "[0]", prec.status().message());
      pt.dtype = *prec;
      DSPLAN_ASSIGN_OR_RETURN(pt.head_dim, r.Int(at[i][1], p + "[1]", 1));
      DSPLAN_ASSIGN_OR_RETURN(pt.causal, r.Bool(at[i][2], p + "[2]"));
      DSPLAN_ASSIGN_OR_RETURN(pt.seq, r.Int(at[i][3], p + "[3]", 1));
      DSPLAN_ASSIGN_OR_RETURN(pt.batch_heads, r.Int(at[i][4], p + "[4]", 1));
      DSPLAN_ASSIGN_OR_RETURN(pt.fwd_flops_per_s, r.Value(at[i][5], p + "[5]", Unit::kFlopsPerS));
      DSPLAN_ASSIGN_OR_RETURN(pt.bwd_flops_per_s, r.Value(at[i][6], p + "[6]", Unit::kFlopsPerS));
      if (pt.fwd_flops_per_s <= 0 || pt.bwd_flops_per_s <= 0) {
        return r.Error(at[i], p, "the forward and backward rates must be positive");
      }
      // A set, not a scan of the earlier rows: a 16 MiB file holds ~400k rows.
      if (!seen.insert({static_cast<int>(pt.dtype), pt.head_dim, pt.causal ? 1 : 0, pt.seq,
                        pt.batch_heads})
               .second) {
        return r.Error(at[i], p,
                       "repeats an earlier row's dtype, head_dim, causal, seq and batch_heads");
      }
      out->push_back(pt);
    }
  }
  return ReadTableSource(r, n, table, !out->empty(), "table of attention rates", source);
}

// A GEMM table (gpu.gemm, stack.gemm): rows [dtype, m, n, k, flops_per_s] with an optional
// layout (6th; tables written before it was measured are the forward's) and batch (7th; 1).
// |fast|, when given, holds the rows the fast scanner read (the node then is an empty list).
Result<std::vector<GemmPoint>> ReadGemmRows(const Reader& r, const std::vector<Row>& rows,
                                            const std::string& key) {
  std::vector<GemmPoint> out;
  out.reserve(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& row = rows[i];
    const std::string p = fmt::format("{}[{}]", key, i);
    const size_t size = row.cells.size();
    if (!row.list || size < 5 || size > 7) {
      return r.ErrorAt(row.line, p,
                       "expected a list [dtype, m, n, k, flops_per_s] or [..., layout] or "
                       "[..., layout, batch]");
    }
    GemmPoint pt;
    if (size == 7) {
      DSPLAN_ASSIGN_OR_RETURN(pt.batch, r.Int(row.cells[6], p + "[6]", 1));
    }
    if (size >= 6) {
      DSPLAN_ASSIGN_OR_RETURN(std::string layout, r.String(row.cells[5], p + "[5]"));
      auto l = ParseGemmLayout(layout);
      if (!l.ok()) return r.ErrorAt(row.cells[5].line, p + "[5]", l.status().message());
      pt.layout = *l;
    }
    DSPLAN_ASSIGN_OR_RETURN(std::string dtype, r.String(row.cells[0], p + "[0]"));
    auto prec = ParsePrecision(dtype);
    if (!prec.ok()) return r.ErrorAt(row.cells[0].line, p + "[0]", prec.status().message());
    pt.dtype = *prec;
    DSPLAN_ASSIGN_OR_RETURN(pt.m, r.Int(row.cells[1], p + "[1]", 1));
    DSPLAN_ASSIGN_OR_RETURN(pt.n, r.Int(row.cells[2], p + "[2]", 1));
    DSPLAN_ASSIGN_OR_RETURN(pt.k, r.Int(row.cells[3], p + "[3]", 1));
    DSPLAN_ASSIGN_OR_RETURN(pt.flops_per_s, r.Value(row.cells[4], p + "[4]", Unit::kFlopsPerS));
    out.push_back(pt);
  }
  return out;
}

Result<std::vector<GemmPoint>> ReadGemmTable(const Reader& r, const YAML::Node& map,
                                             const std::string& key,
                                             const std::vector<Row>* fast) {
  if (fast != nullptr) return ReadGemmRows(r, *fast, key);
  YAML::Node gemm = map["gemm"];
  if (!gemm.IsDefined() || gemm.IsNull()) return std::vector<GemmPoint>{};
  if (!gemm.IsSequence()) return r.Error(gemm, key, "expected a list");
  std::vector<Row> rows;
  rows.reserve(gemm.size());
  for (size_t i = 0; i < gemm.size(); ++i) rows.push_back(Row::Of(gemm[i]));
  return ReadGemmRows(r, rows, key);
}

Result<GpuProfile> ReadGpu(const Reader& r, const YAML::Node& root,
                           const std::vector<Row>* fast_gemm) {
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node n, r.Required(root, "", "gpu"));
  DSPLAN_RETURN_IF_ERROR(r.CheckMap(
      n, "gpu",
      {"name", "memory_bytes", "peak_flops_bf16", "peak_flops_fp16", "peak_flops_tf32",
       "peak_flops_fp32", "hbm_bytes_per_s", "memory_bound_efficiency", "gemm_efficiency",
       "gemm_source", "gemm", "streaming_source", "streaming", "sustained_gemm_source",
       "sustained_gemm", "attention_source", "attention", "sdpa_source", "sdpa",
       "attention_efficiency",
       "kernel_launch_s", "context_bytes"}));
  GpuProfile g;
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node name, r.Required(n, "gpu", "name"));
  DSPLAN_ASSIGN_OR_RETURN(g.name, r.String(name, "gpu.name"));
  DSPLAN_ASSIGN_OR_RETURN(g.memory_bytes, r.NumberOf(n, "gpu", "memory_bytes", Unit::kBytes));
  if (g.memory_bytes.value <= 0) {
    return r.Error(n["memory_bytes"], "gpu.memory_bytes.value", "must be positive");
  }
  DSPLAN_ASSIGN_OR_RETURN(g.peak_flops_bf16,
                          r.NumberOf(n, "gpu", "peak_flops_bf16", Unit::kFlopsPerS));
  DSPLAN_ASSIGN_OR_RETURN(g.peak_flops_fp16,
                          r.NumberOf(n, "gpu", "peak_flops_fp16", Unit::kFlopsPerS));
  DSPLAN_ASSIGN_OR_RETURN(g.peak_flops_tf32,
                          r.NumberOf(n, "gpu", "peak_flops_tf32", Unit::kFlopsPerS));
  DSPLAN_ASSIGN_OR_RETURN(g.peak_flops_fp32,
                          r.NumberOf(n, "gpu", "peak_flops_fp32", Unit::kFlopsPerS));
  DSPLAN_ASSIGN_OR_RETURN(g.hbm_bytes_per_s,
                          r.NumberOf(n, "gpu", "hbm_bytes_per_s", Unit::kBytesPerS));
  DSPLAN_ASSIGN_OR_RETURN(g.memory_bound_efficiency,
                          r.NumberOf(n, "gpu", "memory_bound_efficiency", Unit::kFraction));
  DSPLAN_ASSIGN_OR_RETURN(g.gemm_efficiency,
                          r.NumberOf(n, "gpu", "gemm_efficiency", Unit::kFraction));
  DSPLAN_ASSIGN_OR_RETURN(g.attention_efficiency,
                          r.NumberOf(n, "gpu", "attention_efficiency", Unit::kFraction));
  DSPLAN_ASSIGN_OR_RETURN(g.kernel_launch_s,
                          r.NumberOf(n, "gpu", "kernel_launch_s", Unit::kSeconds));
  DSPLAN_ASSIGN_OR_RETURN(g.context_bytes, r.NumberOf(n, "gpu", "context_bytes", Unit::kBytes));
  DSPLAN_ASSIGN_OR_RETURN(g.gemm, ReadGemmTable(r, n, "gpu.gemm", fast_gemm));
  DSPLAN_RETURN_IF_ERROR(
      ReadTableSource(r, n, "gemm", !g.gemm.empty(), "GEMM table", &g.gemm_source));
  DSPLAN_RETURN_IF_ERROR(ReadPairTable(
      r, n, "streaming", "[bytes, seconds]", Unit::kBytes, Unit::kSeconds, "bytes",
      +[](double bytes, double seconds) -> std::string {
        return bytes > 0 && seconds > 0 ? "" : "bytes and seconds must be positive";
      },
      &g.streaming));
  DSPLAN_RETURN_IF_ERROR(ReadTableSource(r, n, "streaming", !g.streaming.empty(),
                                         "streaming curve", &g.streaming_source));
  DSPLAN_RETURN_IF_ERROR(ReadPairTable(
      r, n, "sustained_gemm", "[duty, time_ratio]", Unit::kFraction, Unit::kRate, "duty",
      +[](double duty, double ratio) -> std::string {
        return duty > 0 && ratio >= 1 && ratio <= 4
                   ? ""
                   : "duty must be in (0, 1] and time_ratio in [1, 4] (sustained time over the "
                     "GEMM's time alone)";
      },
      &g.sustained_gemm));
  DSPLAN_RETURN_IF_ERROR(ReadTableSource(r, n, "sustained_gemm", !g.sustained_gemm.empty(),
                                         "sustained-GEMM curve", &g.sustained_gemm_source));
  DSPLAN_RETURN_IF_ERROR(ReadAttentionTable(r, n, "attention", &g.attention, &g.attention_source));
  DSPLAN_RETURN_IF_ERROR(ReadAttentionTable(r, n, "sdpa", &g.sdpa, &g.sdpa_source));
  return g;
}

// stack: the software stack's measured costs (optional; docs/profile-format.md "stack").
Result<std::pair<double, double>> ReadFwdBwd(const Reader& r, const YAML::Node& n,
                                             const std::string& key, Unit unit) {
  DSPLAN_RETURN_IF_ERROR(r.Tuple(n, key, 2, "[forward, backward]"));
  std::pair<double, double> out;
  DSPLAN_ASSIGN_OR_RETURN(out.first, r.Value(n[0], key + "[0]", unit));
  DSPLAN_ASSIGN_OR_RETURN(out.second, r.Value(n[1], key + "[1]", unit));
  return out;
}

// A mapping whose keys are exactly |names| (each required), each a [forward, backward] pair.
Status ReadNamedPairs(const Reader& r, const YAML::Node& map, const std::string& key,
                      const char* (*name)(int), int count, Unit unit, bool positive,
                      double* fwd, double* bwd) {
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node n, r.Required(map, "stack", key.substr(6).c_str()));
  if (!n.IsMap()) return r.Error(n, key, "expected a mapping");
  for (const auto& kv : n) {
    if (!kv.first.IsScalar()) return r.Error(kv.first, key, "a key is a list or mapping");
    bool ok = false;
    for (int i = 0; i < count; ++i) ok = ok || kv.first.Scalar() == name(i);
    if (!ok) {
      std::string valid;
      for (int i = 0; i < count; ++i) valid += (i ? ", " : "") + std::string(name(i));
      return r.Error(kv.first, Reader::Join(key, Escape(kv.first.Scalar())),
                     fmt::format("unknown key (valid here: {})", valid));
    }
  }
  for (int i = 0; i < count; ++i) {
    DSPLAN_ASSIGN_OR_RETURN(YAML::Node v, r.Required(n, key, name(i)));
    const std::string k = Reader::Join(key, name(i));
    DSPLAN_ASSIGN_OR_RETURN(auto fb, ReadFwdBwd(r, v, k, unit));
    if (positive && (fb.first <= 0 || fb.second <= 0)) {
      return r.Error(v, k, "the forward and backward rates must be positive");
    }
    fwd[i] = fb.first;
    bwd[i] = fb.second;
  }
  return Status();
}

Result<std::string> OptionalString(const Reader& r, const YAML::Node& map, const std::string& key,
                                   const char* child) {
  YAML::Node n = map[child];
  if (!n.IsDefined() || n.IsNull()) return std::string();
  return r.String(n, Reader::Join(key, child));
}

Result<StackProfile> ReadStack(const Reader& r, const YAML::Node& root,
                               const std::vector<Row>* fast_gemm) {
  StackProfile s;
  YAML::Node n = root["stack"];
  if (!n.IsDefined() || n.IsNull()) return s;
  DSPLAN_RETURN_IF_ERROR(r.CheckMap(n, "stack",
                                    {"measured",
                                     "datasheet",
                                     "assumption",
                                     "gpu",
                                     "date",
                                     "versions",
                                     "reference_stream_bytes_per_s",
                                     "kernels",
                                     "ops",
                                     "kernel_s",
                                     "zero3",
                                     "optimizer_step",
                                     "bf16_optimizer_step",
                                     "optimizer_kernels",
                                     "cast_copy_d2h",
                                     "cast_copy_d2h_heap",
                                     "blocks",
                                     "rests",
                                     "gemm_source",
                                     "gemm"}));
  s.present = true;
  DSPLAN_ASSIGN_OR_RETURN(s.source, r.SourceOf(n, "stack"));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node gpu, r.Required(n, "stack", "gpu"));
  DSPLAN_ASSIGN_OR_RETURN(s.gpu, r.String(gpu, "stack.gpu"));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node date, r.Required(n, "stack", "date"));
  DSPLAN_ASSIGN_OR_RETURN(s.date, r.String(date, "stack.date"));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node v, r.Required(n, "stack", "versions"));
  DSPLAN_RETURN_IF_ERROR(r.CheckMap(v, "stack.versions",
                                    {"torch", "cuda", "transformers", "deepspeed", "python"}));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node torch, r.Required(v, "stack.versions", "torch"));
  DSPLAN_ASSIGN_OR_RETURN(s.versions.torch, r.String(torch, "stack.versions.torch"));
  DSPLAN_ASSIGN_OR_RETURN(s.versions.cuda, OptionalString(r, v, "stack.versions", "cuda"));
  DSPLAN_ASSIGN_OR_RETURN(s.versions.transformers,
                          OptionalString(r, v, "stack.versions", "transformers"));
  DSPLAN_ASSIGN_OR_RETURN(s.versions.deepspeed,
                          OptionalString(r, v, "stack.versions", "deepspeed"));
  DSPLAN_ASSIGN_OR_RETURN(s.versions.python, OptionalString(r, v, "stack.versions", "python"));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node ref, r.Required(n, "stack", "reference_stream_bytes_per_s"));
  DSPLAN_ASSIGN_OR_RETURN(s.reference_stream_bytes_per_s,
                          r.Value(ref, "stack.reference_stream_bytes_per_s", Unit::kBytesPerS));
  if (s.reference_stream_bytes_per_s <= 0) {
    return r.Error(ref, "stack.reference_stream_bytes_per_s", "must be positive");
  }
  DSPLAN_RETURN_IF_ERROR(ReadNamedPairs(r, n, "stack.kernels", StackKernelClassName,
                                        kStackKernelClasses, Unit::kBytesPerS, true,
                                        s.kernel_fwd_bytes_per_s.data(),
                                        s.kernel_bwd_bytes_per_s.data()));
  DSPLAN_RETURN_IF_ERROR(ReadNamedPairs(r, n, "stack.ops", StackOpKindName, kStackOpKinds,
                                        Unit::kSeconds, false, s.op_fwd_s.data(),
                                        s.op_bwd_s.data()));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node ks, r.Required(n, "stack", "kernel_s"));
  DSPLAN_ASSIGN_OR_RETURN(auto kernel, ReadFwdBwd(r, ks, "stack.kernel_s", Unit::kSeconds));
  s.kernel_fwd_s = kernel.first;
  s.kernel_bwd_s = kernel.second;
  const YAML::Node z3 = n["zero3"];
  if (z3.IsDefined() && !z3.IsNull()) {
    DSPLAN_RETURN_IF_ERROR(r.CheckMap(z3, "stack.zero3",
                                      {"fwd_per_module_s", "fwd_per_param_s", "bwd_per_module_s",
                                       "bwd_per_param_s", "per_gather_call_s",
                                       "per_bucket_flush_s"}));
    // The hooks' four costs come together (one fit) or not at all; the per-call and per-flush
    // costs are measured apart (stack_costs.py "zero3_calls") and each may be absent.
    const std::pair<const char*, double*> fields[] = {
        {"fwd_per_module_s", &s.z3_fwd_per_module_s}, {"fwd_per_param_s", &s.z3_fwd_per_param_s},
        {"bwd_per_module_s", &s.z3_bwd_per_module_s}, {"bwd_per_param_s", &s.z3_bwd_per_param_s}};
    for (const auto& [name, out] : fields) s.zero3 = s.zero3 || z3[name].IsDefined();
    for (const auto& [name, out] : fields) {
      if (!s.zero3) break;
      DSPLAN_ASSIGN_OR_RETURN(YAML::Node x, r.Required(z3, "stack.zero3", name));
      DSPLAN_ASSIGN_OR_RETURN(*out, r.Value(x, Reader::Join("stack.zero3", name), Unit::kSeconds));
    }
    const std::pair<const char*, std::optional<double>*> calls[] = {
        {"per_gather_call_s", &s.z3_per_gather_call_s},
        {"per_bucket_flush_s", &s.z3_per_bucket_flush_s}};
    for (const auto& [name, out] : calls) {
      const YAML::Node x = z3[name];
      if (!x.IsDefined() || x.IsNull()) continue;
      const std::string key = Reader::Join("stack.zero3", name);
      DSPLAN_ASSIGN_OR_RETURN(double v, r.Value(x, key, Unit::kSeconds));
      if (!(v > 0)) return r.Error(x, key, "must be positive");
      *out = v;
    }
    if (!s.zero3 && !s.z3_per_gather_call_s && !s.z3_per_bucket_flush_s) {
      return r.Error(z3, "stack.zero3",
                     "empty (expected the hook costs fwd_per_module_s, fwd_per_param_s, "
                     "bwd_per_module_s, bwd_per_param_s and/or per_gather_call_s, "
                     "per_bucket_flush_s)");
    }
  }
  YAML::Node step = n["optimizer_step"];
  if (step.IsDefined() && !step.IsNull()) {
    DSPLAN_RETURN_IF_ERROR(r.CheckMap(step, "stack.optimizer_step",
                                      {"zero12_s", "zero12_per_param_s", "zero3_s",
                                       "zero3_per_param_s"}));
    s.optimizer_step = true;
    const std::pair<const char*, double*> fields[] = {
        {"zero12_s", &s.z12_step_s}, {"zero12_per_param_s", &s.z12_step_per_param_s},
        {"zero3_s", &s.z3_step_s}, {"zero3_per_param_s", &s.z3_step_per_param_s}};
    for (const auto& [name, out] : fields) {
      DSPLAN_ASSIGN_OR_RETURN(YAML::Node x, r.Required(step, "stack.optimizer_step", name));
      DSPLAN_ASSIGN_OR_RETURN(
          *out, r.Value(x, Reader::Join("stack.optimizer_step", name), Unit::kSeconds));
    }
  }
  YAML::Node bf16 = n["bf16_optimizer_step"];
  if (bf16.IsDefined() && !bf16.IsNull()) {
    // One fit per clip setting, so the four keys come together.
    const char* where = "stack.bf16_optimizer_step";
    DSPLAN_RETURN_IF_ERROR(r.CheckMap(bf16, where,
                                      {"step_s", "step_per_param_s", "clip_step_s",
                                       "clip_step_per_param_s"}));
    s.bf16_step = true;
    const std::pair<const char*, double*> fields[] = {
        {"step_s", &s.bf16_step_s},
        {"step_per_param_s", &s.bf16_step_per_param_s},
        {"clip_step_s", &s.bf16_clip_step_s},
        {"clip_step_per_param_s", &s.bf16_clip_step_per_param_s}};
    for (const auto& [name, out] : fields) {
      DSPLAN_ASSIGN_OR_RETURN(YAML::Node x, r.Required(bf16, where, name));
      DSPLAN_ASSIGN_OR_RETURN(*out, r.Value(x, Reader::Join(where, name), Unit::kSeconds));
    }
  }
  YAML::Node ok = n["optimizer_kernels"];
  if (ok.IsDefined() && !ok.IsNull()) {
    // Each rate on its own (a probe run without DeepSpeed measures no FusedAdam); at least one.
    const char* where = "stack.optimizer_kernels";
    const std::pair<const char*, double*> fields[] = {{"fp64_cast", &s.fp64_cast_bytes_per_s},
                                                      {"fp64_norm", &s.fp64_norm_bytes_per_s},
                                                      {"step_flat", &s.step_flat_bytes_per_s},
                                                      {"fused_adam", &s.fused_adam_bytes_per_s},
                                                      {"torch_adam", &s.torch_adam_bytes_per_s}};
    DSPLAN_RETURN_IF_ERROR(
        r.CheckMap(ok, where, {"fp64_cast", "fp64_norm", "step_flat", "fused_adam", "torch_adam"}));
    for (const auto& [name, out] : fields) {
      const YAML::Node x = ok[name];
      if (!x.IsDefined() || x.IsNull()) continue;
      const std::string key = Reader::Join(where, name);
      DSPLAN_ASSIGN_OR_RETURN(*out, r.Value(x, key, Unit::kBytesPerS));
      if (!(*out > 0)) return r.Error(x, key, "must be positive (bytes per second)");
      s.optimizer_kernels = true;
    }
    if (!s.optimizer_kernels) {
      return r.Error(ok, where,
                     "empty (expected one or more of fp64_cast, fp64_norm, step_flat, fused_adam, "
                     "torch_adam, in bytes per second)");
    }
  }
  // The cast-copy curves: [bytes, seconds] points, bytes ascending.
  auto cast_curve = [&](const char* key, std::vector<std::pair<double, double>>* out) -> Status {
    YAML::Node cast = n[key];
    if (!cast.IsDefined() || cast.IsNull()) return Status();
    const std::string where = std::string("stack.") + key;
    if (!cast.IsSequence() || cast.size() < 2 || cast.size() > 64) {
      return r.Error(cast, where, "expected a list of 2 to 64 [bytes, seconds] points");
    }
    for (size_t i = 0; i < cast.size(); ++i) {
      const std::string p = fmt::format("{}[{}]", where, i);
      DSPLAN_RETURN_IF_ERROR(r.Tuple(cast[i], p, 2, "[bytes, seconds]"));
      DSPLAN_ASSIGN_OR_RETURN(double bytes, r.Value(cast[i][0], p + "[0]", Unit::kBytes));
      DSPLAN_ASSIGN_OR_RETURN(double sec, r.Value(cast[i][1], p + "[1]", Unit::kSeconds));
      if (!(bytes > 0) || !(sec > 0))
        return r.Error(cast[i], p, "bytes and seconds must be positive");
      if (!out->empty() && bytes <= out->back().first) {
        return r.Error(cast[i], p, "bytes must be larger than the previous point's");
      }
      out->emplace_back(bytes, sec);
    }
    return Status();
  };
  DSPLAN_RETURN_IF_ERROR(cast_curve("cast_copy_d2h", &s.cast_copy_d2h));
  DSPLAN_RETURN_IF_ERROR(cast_curve("cast_copy_d2h_heap", &s.cast_copy_d2h_heap));
  YAML::Node blocks = n["blocks"];
  if (blocks.IsDefined() && !blocks.IsNull()) {
    if (!blocks.IsSequence()) return r.Error(blocks, "stack.blocks", "expected a list");
    for (size_t i = 0; i < blocks.size(); ++i) {
      const std::string p = fmt::format("stack.blocks[{}]", i);
      const YAML::Node b = blocks[i];
      DSPLAN_RETURN_IF_ERROR(r.Tuple(b, p, 8,
                                     "[model_type, encoder|decoder, fwd_s, bwd_s, ckpt_fwd_s, "
                                     "ckpt_bwd_s, modules, param_tensors]"));
      StackBlockPoint pt;
      DSPLAN_ASSIGN_OR_RETURN(pt.model_type, r.String(b[0], p + "[0]"));
      DSPLAN_ASSIGN_OR_RETURN(std::string kind, r.String(b[1], p + "[1]"));
      if (kind != "encoder" && kind != "decoder") {
        return r.Error(b[1], p + "[1]",
                       fmt::format("{} is not a block kind (valid: encoder, decoder)", Quote(kind)));
      }
      pt.encoder = kind == "encoder";
      DSPLAN_ASSIGN_OR_RETURN(pt.fwd_s, r.Value(b[2], p + "[2]", Unit::kSeconds));
      DSPLAN_ASSIGN_OR_RETURN(pt.bwd_s, r.Value(b[3], p + "[3]", Unit::kSeconds));
      DSPLAN_ASSIGN_OR_RETURN(pt.ckpt_fwd_s, r.Value(b[4], p + "[4]", Unit::kSeconds));
      DSPLAN_ASSIGN_OR_RETURN(pt.ckpt_bwd_s, r.Value(b[5], p + "[5]", Unit::kSeconds));
      DSPLAN_ASSIGN_OR_RETURN(int64_t modules, r.Int(b[6], p + "[6]", 0, 1 << 20));
      DSPLAN_ASSIGN_OR_RETURN(int64_t params, r.Int(b[7], p + "[7]", 0, 1 << 20));
      pt.modules = static_cast<int32_t>(modules);
      pt.param_tensors = static_cast<int32_t>(params);
      for (const StackBlockPoint& q : s.blocks) {
        if (q.model_type == pt.model_type && q.encoder == pt.encoder) {
          return r.Error(b, p, "repeats an earlier row's model_type and block kind");
        }
      }
      s.blocks.push_back(pt);
    }
  }
  YAML::Node rests = n["rests"];
  if (rests.IsDefined() && !rests.IsNull()) {
    if (!rests.IsSequence()) return r.Error(rests, "stack.rests", "expected a list");
    for (size_t i = 0; i < rests.size(); ++i) {
      const std::string p = fmt::format("stack.rests[{}]", i);
      const YAML::Node b = rests[i];
      DSPLAN_RETURN_IF_ERROR(r.Tuple(b, p, 3, "[model_type, fwd_s, bwd_s]"));
      StackRestPoint pt;
      DSPLAN_ASSIGN_OR_RETURN(pt.model_type, r.String(b[0], p + "[0]"));
      DSPLAN_ASSIGN_OR_RETURN(pt.fwd_s, r.Value(b[1], p + "[1]", Unit::kSeconds));
      DSPLAN_ASSIGN_OR_RETURN(pt.bwd_s, r.Value(b[2], p + "[2]", Unit::kSeconds));
      for (const StackRestPoint& q : s.rests) {
        if (q.model_type == pt.model_type) {
          return r.Error(b, p, "repeats an earlier row's model_type");
        }
      }
      s.rests.push_back(pt);
    }
  }
  DSPLAN_ASSIGN_OR_RETURN(s.gemm, ReadGemmTable(r, n, "stack.gemm", fast_gemm));
  YAML::Node gs = n["gemm_source"];
  if (gs.IsDefined() && !gs.IsNull()) {
    DSPLAN_RETURN_IF_ERROR(r.CheckMap(gs, "stack.gemm_source", {"datasheet", "measured",
                                                                "assumption"}));
    DSPLAN_ASSIGN_OR_RETURN(s.gemm_source, r.SourceOf(gs, "stack.gemm_source"));
  } else if (!s.gemm.empty()) {
    return r.Error(n, "stack.gemm_source", "missing: a GEMM table needs its source (the method)");
  }
  return s;
}

Result<HostProfile> ReadHost(const Reader& r, const YAML::Node& root) {
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node n, r.Required(root, "", "host"));
  DSPLAN_RETURN_IF_ERROR(r.CheckMap(
      n, "host",
      {"cores", "ram_bytes", "cpu_adam", "cpu_adam_source", "pinned_alloc_bytes_per_s",
       "pageable_alloc_bytes_per_s", "parallel_alloc_bytes_per_s", "memcpy_bytes_per_s"}));
  HostProfile h;
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node cores, r.Required(n, "host", "cores"));
  DSPLAN_ASSIGN_OR_RETURN(int64_t c, r.Int(cores, "host.cores", 1));
  h.cores = static_cast<int>(c);
  DSPLAN_ASSIGN_OR_RETURN(h.ram_bytes, r.NumberOf(n, "host", "ram_bytes", Unit::kBytes));
  DSPLAN_ASSIGN_OR_RETURN(h.pinned_alloc_bytes_per_s,
                          r.NumberOf(n, "host", "pinned_alloc_bytes_per_s", Unit::kBytesPerS));
  DSPLAN_ASSIGN_OR_RETURN(h.pageable_alloc_bytes_per_s,
                          r.NumberOf(n, "host", "pageable_alloc_bytes_per_s", Unit::kBytesPerS));
  DSPLAN_ASSIGN_OR_RETURN(h.memcpy_bytes_per_s,
                          r.NumberOf(n, "host", "memcpy_bytes_per_s", Unit::kBytesPerS));
  if (n["parallel_alloc_bytes_per_s"].IsDefined()) {
    DSPLAN_ASSIGN_OR_RETURN(
        h.parallel_alloc_bytes_per_s,
        r.NumberOf(n, "host", "parallel_alloc_bytes_per_s", Unit::kBytesPerS));
  } else {
    h.parallel_alloc_bytes_per_s.value = h.pageable_alloc_bytes_per_s.value;
    h.parallel_alloc_bytes_per_s.source = Source{
        SourceKind::kAssumption,
        "not in this profile: one thread's rate (host.pageable_alloc_bytes_per_s), which "
        "threads faulting one mapping in parallel reach at least; dsplan profile measures it"};
  }
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node adam, r.Required(n, "host", "cpu_adam"));
  if (!adam.IsSequence() || adam.size() == 0) {
    return r.Error(adam, "host.cpu_adam", "expected a non-empty list of [threads, elements_per_s]");
  }
  for (size_t i = 0; i < adam.size(); ++i) {
    const std::string p = fmt::format("host.cpu_adam[{}]", i);
    DSPLAN_RETURN_IF_ERROR(r.Tuple(adam[i], p, 2, "[threads, elements_per_s]"));
    CpuAdamPoint pt;
    DSPLAN_ASSIGN_OR_RETURN(int64_t t, r.Int(adam[i][0], p + "[0]", 1));
    pt.threads = static_cast<int>(t);
    DSPLAN_ASSIGN_OR_RETURN(pt.elements_per_s, r.Value(adam[i][1], p + "[1]", Unit::kRate));
    h.cpu_adam.push_back(pt);
  }
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node as, r.Required(n, "host", "cpu_adam_source"));
  DSPLAN_RETURN_IF_ERROR(
      r.CheckMap(as, "host.cpu_adam_source", {"datasheet", "measured", "assumption"}));
  DSPLAN_ASSIGN_OR_RETURN(h.cpu_adam_source, r.SourceOf(as, "host.cpu_adam_source"));
  return h;
}

Result<LinkProfile> ReadLinks(const Reader& r, const YAML::Node& root) {
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node n, r.Required(root, "", "links"));
  DSPLAN_RETURN_IF_ERROR(r.CheckMap(
      n, "links", {"h2d_pinned", "h2d_pageable", "d2h_pinned", "d2h_pageable", "collectives"}));
  LinkProfile l;
  DSPLAN_ASSIGN_OR_RETURN(l.h2d_pinned, ReadCopy(r, n, "h2d_pinned"));
  DSPLAN_ASSIGN_OR_RETURN(l.h2d_pageable, ReadCopy(r, n, "h2d_pageable"));
  DSPLAN_ASSIGN_OR_RETURN(l.d2h_pinned, ReadCopy(r, n, "d2h_pinned"));
  DSPLAN_ASSIGN_OR_RETURN(l.d2h_pageable, ReadCopy(r, n, "d2h_pageable"));
  YAML::Node colls = n["collectives"];
  if (colls.IsDefined() && !colls.IsNull()) {
    if (!colls.IsSequence()) return r.Error(colls, "links.collectives", "expected a list");
    for (size_t i = 0; i < colls.size(); ++i) {
      const std::string p = fmt::format("links.collectives[{}]", i);
      const YAML::Node& c = colls[i];
      DSPLAN_RETURN_IF_ERROR(r.CheckMap(
          c, p, {"op", "ranks", "inter_node", "alpha_s", "busbw_bytes_per_s", "points"}));
      CollectiveCurve cc;
      DSPLAN_ASSIGN_OR_RETURN(YAML::Node op, r.Required(c, p, "op"));
      DSPLAN_ASSIGN_OR_RETURN(std::string op_name, r.String(op, p + ".op"));
      auto coll = ParseCollective(op_name);
      if (!coll.ok()) return r.Error(op, p + ".op", coll.status().message());
      cc.op = *coll;
      DSPLAN_ASSIGN_OR_RETURN(YAML::Node ranks, r.Required(c, p, "ranks"));
      DSPLAN_ASSIGN_OR_RETURN(int64_t rk, r.Int(ranks, p + ".ranks", 2));
      cc.ranks = static_cast<int>(rk);
      DSPLAN_ASSIGN_OR_RETURN(YAML::Node inter, r.Required(c, p, "inter_node"));
      DSPLAN_ASSIGN_OR_RETURN(cc.inter_node, r.Bool(inter, p + ".inter_node"));
      DSPLAN_ASSIGN_OR_RETURN(cc.alpha_s, r.NumberOf(c, p, "alpha_s", Unit::kSeconds));
      DSPLAN_ASSIGN_OR_RETURN(cc.busbw_bytes_per_s,
                              r.NumberOf(c, p, "busbw_bytes_per_s", Unit::kBytesPerS));
      DSPLAN_ASSIGN_OR_RETURN(cc.points, ReadPoints(r, c, p));
      l.collectives.push_back(std::move(cc));
    }
  }
  return l;
}

Result<NvmeProfile> ReadNvme(const Reader& r, const YAML::Node& root) {
  NvmeProfile v;
  YAML::Node n = root["nvme"];
  if (!n.IsDefined() || n.IsNull()) return v;
  DSPLAN_RETURN_IF_ERROR(r.CheckMap(n, "nvme", {"present", "path", "capacity_bytes",
                                                "read_bytes_per_s", "write_bytes_per_s",
                                                "points"}));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node present, r.Required(n, "nvme", "present"));
  DSPLAN_ASSIGN_OR_RETURN(v.present, r.Bool(present, "nvme.present"));
  if (!v.present) {
    if (n.size() != 1) {
      return r.Error(n, "nvme", "with present: false, no other key is allowed");
    }
    return v;
  }
  YAML::Node path = n["path"];
  if (path.IsDefined() && !path.IsNull()) {
    DSPLAN_ASSIGN_OR_RETURN(v.path, r.String(path, "nvme.path"));
  }
  DSPLAN_ASSIGN_OR_RETURN(v.capacity_bytes,
                          r.NumberOf(n, "nvme", "capacity_bytes", Unit::kBytes));
  DSPLAN_ASSIGN_OR_RETURN(v.read_bytes_per_s,
                          r.NumberOf(n, "nvme", "read_bytes_per_s", Unit::kBytesPerS));
  DSPLAN_ASSIGN_OR_RETURN(v.write_bytes_per_s,
                          r.NumberOf(n, "nvme", "write_bytes_per_s", Unit::kBytesPerS));
  YAML::Node pts = n["points"];
  if (pts.IsDefined() && !pts.IsNull()) {
    if (!pts.IsSequence()) {
      return r.Error(pts, "nvme.points",
                     "expected a list of [block_size, queue_depth, read_bytes_per_s, "
                     "write_bytes_per_s]");
    }
    for (size_t i = 0; i < pts.size(); ++i) {
      const std::string p = fmt::format("nvme.points[{}]", i);
      DSPLAN_RETURN_IF_ERROR(r.Tuple(
          pts[i], p, 4, "[block_size, queue_depth, read_bytes_per_s, write_bytes_per_s]"));
      NvmePoint pt;
      DSPLAN_ASSIGN_OR_RETURN(double bs, r.Value(pts[i][0], p + "[0]", Unit::kBytes));
      pt.block_size = static_cast<int64_t>(bs);
      DSPLAN_ASSIGN_OR_RETURN(int64_t qd, r.Int(pts[i][1], p + "[1]", 1));
      pt.queue_depth = static_cast<int>(qd);
      DSPLAN_ASSIGN_OR_RETURN(pt.read_bytes_per_s, r.Value(pts[i][2], p + "[2]", Unit::kBytesPerS));
      DSPLAN_ASSIGN_OR_RETURN(pt.write_bytes_per_s,
                              r.Value(pts[i][3], p + "[3]", Unit::kBytesPerS));
      v.points.push_back(pt);
    }
  }
  return v;
}

// The GEMM tables' rows as the fast scanner read them (see PrescanGemmTables).
struct FastTables {
  bool gpu = false, stack = false;
  std::vector<Row> gpu_rows, stack_rows;
};

Result<HardwareProfile> ReadProfile(const Reader& r, const YAML::Node& root,
                                    const FastTables& fast) {
  DSPLAN_RETURN_IF_ERROR(r.CheckMap(root, "(top level)", {"name", "description", "base",
                                                          "gpus_per_node", "gpu", "host",
                                                          "links", "nvme", "stack"}));
  HardwareProfile p;
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node name, r.Required(root, "", "name"));
  DSPLAN_ASSIGN_OR_RETURN(p.name, r.String(name, "name"));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node desc, r.Required(root, "", "description"));
  DSPLAN_ASSIGN_OR_RETURN(p.description, r.String(desc, "description"));
  YAML::Node base = root["base"];
  if (base.IsDefined() && !base.IsNull()) {
    DSPLAN_ASSIGN_OR_RETURN(p.base, r.String(base, "base"));
  }
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node gpn, r.Required(root, "", "gpus_per_node"));
  DSPLAN_ASSIGN_OR_RETURN(int64_t g, r.Int(gpn, "gpus_per_node", 1, kMaxGpusPerNode));
  p.gpus_per_node = static_cast<int>(g);
  DSPLAN_ASSIGN_OR_RETURN(p.gpu, ReadGpu(r, root, fast.gpu ? &fast.gpu_rows : nullptr));
  DSPLAN_ASSIGN_OR_RETURN(p.host, ReadHost(r, root));
  DSPLAN_ASSIGN_OR_RETURN(p.links, ReadLinks(r, root));
  DSPLAN_ASSIGN_OR_RETURN(p.nvme, ReadNvme(r, root));
  DSPLAN_ASSIGN_OR_RETURN(p.stack, ReadStack(r, root, fast.stack ? &fast.stack_rows : nullptr));
  return p;
}

// ---- writing ----

// Shortest text that reads back to the same double (fmt's "{}" is round-trip exact).
std::string Num(double v) { return fmt::format("{}", v); }

void EmitSource(YAML::Emitter& e, const Source& s) {
  e << YAML::Key << SourceKindName(s.kind) << YAML::Value << YAML::DoubleQuoted << s.detail;
}

void EmitNumber(YAML::Emitter& e, const char* key, const Number& n) {
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
  e << YAML::Key << "value" << YAML::Value << Num(n.value);
  EmitSource(e, n.source);
  e << YAML::EndMap;
}

void EmitSourceMap(YAML::Emitter& e, const char* key, const Source& s) {
  e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginMap;
  EmitSource(e, s);
  e << YAML::EndMap;
}

// gpu.|table|_source and gpu.|table| as [x, y] rows (ReadPairTable's form); nothing when empty.
template <class Point>
void EmitPairTable(YAML::Emitter& e, const std::string& table, const Source& source,
                   const std::vector<Point>& points, double Point::*x, double Point::*y) {
  if (points.empty()) return;
  EmitSourceMap(e, (table + "_source").c_str(), source);
  e << YAML::Key << table << YAML::Value << YAML::BeginSeq;
  for (const Point& pt : points) {
    e << YAML::Flow << YAML::BeginSeq << Num(pt.*x) << Num(pt.*y) << YAML::EndSeq;
  }
  e << YAML::EndSeq;
}

// gpu.|table|_source and gpu.|table| (attention, sdpa) in ReadAttentionTable's row form;
// nothing when empty.
void EmitAttentionTable(YAML::Emitter& e, const std::string& table, const Source& source,
                        const std::vector<AttentionPoint>& points) {
  if (points.empty()) return;
  EmitSourceMap(e, (table + "_source").c_str(), source);
  e << YAML::Key << table << YAML::Value << YAML::BeginSeq;
  for (const AttentionPoint& pt : points) {
    e << YAML::Flow << YAML::BeginSeq << PrecisionName(pt.dtype) << pt.head_dim
      << (pt.causal ? "true" : "false") << pt.seq << pt.batch_heads << Num(pt.fwd_flops_per_s)
      << Num(pt.bwd_flops_per_s) << YAML::EndSeq;
  }
  e << YAML::EndSeq;
}

void EmitPoints(YAML::Emitter& e, const std::vector<BandwidthPoint>& pts) {
  if (pts.empty()) return;
  e << YAML::Key << "points" << YAML::Value << YAML::BeginSeq;
  for (const BandwidthPoint& p : pts) {
    e << YAML::Flow << YAML::BeginSeq << Num(p.bytes) << Num(p.bytes_per_s) << YAML::EndSeq;
  }
  e << YAML::EndSeq;
}

void EmitCopy(YAML::Emitter& e, const char* key, const CopyCurve& c) {
  e << YAML::Key << key << YAML::Value << YAML::BeginMap;
  EmitNumber(e, "latency_s", c.latency_s);
  EmitNumber(e, "bytes_per_s", c.bytes_per_s);
  EmitPoints(e, c.points);
  e << YAML::EndMap;
}

void EmitGemmRows(YAML::Emitter& e, const std::vector<GemmPoint>& rows) {
  e << YAML::Key << "gemm" << YAML::Value << YAML::BeginSeq;
  for (const GemmPoint& pt : rows) {
    e << YAML::Flow << YAML::BeginSeq << PrecisionName(pt.dtype) << pt.m << pt.n << pt.k
      << Num(pt.flops_per_s) << GemmLayoutName(pt.layout);
    if (pt.batch > 1) e << pt.batch;
    e << YAML::EndSeq;
  }
  e << YAML::EndSeq;
}

std::string EmitProfile(const HardwareProfile& p) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << p.name;
  e << YAML::Key << "description" << YAML::Value << YAML::DoubleQuoted << p.description;
  if (!p.base.empty()) e << YAML::Key << "base" << YAML::Value << p.base;
  e << YAML::Key << "gpus_per_node" << YAML::Value << p.gpus_per_node;

  const GpuProfile& g = p.gpu;
  e << YAML::Key << "gpu" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << YAML::DoubleQuoted << g.name;
  EmitNumber(e, "memory_bytes", g.memory_bytes);
  EmitNumber(e, "peak_flops_bf16", g.peak_flops_bf16);
  EmitNumber(e, "peak_flops_fp16", g.peak_flops_fp16);
  EmitNumber(e, "peak_flops_tf32", g.peak_flops_tf32);
  EmitNumber(e, "peak_flops_fp32", g.peak_flops_fp32);
  EmitNumber(e, "hbm_bytes_per_s", g.hbm_bytes_per_s);
  EmitNumber(e, "memory_bound_efficiency", g.memory_bound_efficiency);
  EmitNumber(e, "gemm_efficiency", g.gemm_efficiency);
  EmitNumber(e, "attention_efficiency", g.attention_efficiency);
  EmitNumber(e, "kernel_launch_s", g.kernel_launch_s);
  EmitNumber(e, "context_bytes", g.context_bytes);
  if (!g.gemm.empty() || !g.gemm_source.detail.empty()) {
    EmitSourceMap(e, "gemm_source", g.gemm_source);
  }
  if (!g.gemm.empty()) EmitGemmRows(e, g.gemm);
  EmitPairTable(e, "streaming", g.streaming_source, g.streaming, &StreamPoint::bytes,
                &StreamPoint::seconds);
  EmitPairTable(e, "sustained_gemm", g.sustained_gemm_source, g.sustained_gemm, &DutyPoint::duty,
                &DutyPoint::time_ratio);
  EmitAttentionTable(e, "attention", g.attention_source, g.attention);
  EmitAttentionTable(e, "sdpa", g.sdpa_source, g.sdpa);
  e << YAML::EndMap;

  const HostProfile& h = p.host;
  e << YAML::Key << "host" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "cores" << YAML::Value << h.cores;
  EmitNumber(e, "ram_bytes", h.ram_bytes);
  EmitNumber(e, "pinned_alloc_bytes_per_s", h.pinned_alloc_bytes_per_s);
  EmitNumber(e, "pageable_alloc_bytes_per_s", h.pageable_alloc_bytes_per_s);
  EmitNumber(e, "parallel_alloc_bytes_per_s", h.parallel_alloc_bytes_per_s);
  EmitNumber(e, "memcpy_bytes_per_s", h.memcpy_bytes_per_s);
  EmitSourceMap(e, "cpu_adam_source", h.cpu_adam_source);
  e << YAML::Key << "cpu_adam" << YAML::Value << YAML::BeginSeq;
  for (const CpuAdamPoint& pt : h.cpu_adam) {
    e << YAML::Flow << YAML::BeginSeq << pt.threads << Num(pt.elements_per_s) << YAML::EndSeq;
  }
  e << YAML::EndSeq;
  e << YAML::EndMap;

  const LinkProfile& l = p.links;
  e << YAML::Key << "links" << YAML::Value << YAML::BeginMap;
  EmitCopy(e, "h2d_pinned", l.h2d_pinned);
  EmitCopy(e, "h2d_pageable", l.h2d_pageable);
  EmitCopy(e, "d2h_pinned", l.d2h_pinned);
  EmitCopy(e, "d2h_pageable", l.d2h_pageable);
  if (!l.collectives.empty()) {
    e << YAML::Key << "collectives" << YAML::Value << YAML::BeginSeq;
    for (const CollectiveCurve& c : l.collectives) {
      e << YAML::BeginMap;
      e << YAML::Key << "op" << YAML::Value << CollectiveName(c.op);
      e << YAML::Key << "ranks" << YAML::Value << c.ranks;
      e << YAML::Key << "inter_node" << YAML::Value << (c.inter_node ? "true" : "false");
      EmitNumber(e, "alpha_s", c.alpha_s);
      EmitNumber(e, "busbw_bytes_per_s", c.busbw_bytes_per_s);
      EmitPoints(e, c.points);
      e << YAML::EndMap;
    }
    e << YAML::EndSeq;
  }
  e << YAML::EndMap;

  const NvmeProfile& v = p.nvme;
  e << YAML::Key << "nvme" << YAML::Value << YAML::BeginMap;
  e << YAML::Key << "present" << YAML::Value << (v.present ? "true" : "false");
  if (v.present) {
    if (!v.path.empty()) e << YAML::Key << "path" << YAML::Value << YAML::DoubleQuoted << v.path;
    EmitNumber(e, "capacity_bytes", v.capacity_bytes);
    EmitNumber(e, "read_bytes_per_s", v.read_bytes_per_s);
    EmitNumber(e, "write_bytes_per_s", v.write_bytes_per_s);
    if (!v.points.empty()) {
      e << YAML::Key << "points" << YAML::Value << YAML::BeginSeq;
      for (const NvmePoint& pt : v.points) {
        e << YAML::Flow << YAML::BeginSeq << pt.block_size << pt.queue_depth
          << Num(pt.read_bytes_per_s) << Num(pt.write_bytes_per_s) << YAML::EndSeq;
      }
      e << YAML::EndSeq;
    }
  }
  e << YAML::EndMap;
  const StackProfile& s = p.stack;
  if (s.present) {
    auto pair = [&e](const char* key, double f, double b) {
      e << YAML::Key << key << YAML::Value << YAML::Flow << YAML::BeginSeq << Num(f) << Num(b)
        << YAML::EndSeq;
    };
    e << YAML::Key << "stack" << YAML::Value << YAML::BeginMap;
    EmitSource(e, s.source);
    e << YAML::Key << "gpu" << YAML::Value << YAML::DoubleQuoted << s.gpu;
    e << YAML::Key << "date" << YAML::Value << YAML::DoubleQuoted << s.date;
    e << YAML::Key << "versions" << YAML::Value << YAML::Flow << YAML::BeginMap;
    const std::pair<const char*, const std::string*> versions[] = {
        {"torch", &s.versions.torch}, {"cuda", &s.versions.cuda},
        {"transformers", &s.versions.transformers}, {"deepspeed", &s.versions.deepspeed},
        {"python", &s.versions.python}};
    for (const auto& [key, value] : versions) {
      if (key == std::string("torch") || !value->empty()) {
        e << YAML::Key << key << YAML::Value << YAML::DoubleQuoted << *value;
      }
    }
    e << YAML::EndMap;
    e << YAML::Key << "reference_stream_bytes_per_s" << YAML::Value
      << Num(s.reference_stream_bytes_per_s);
    e << YAML::Key << "kernels" << YAML::Value << YAML::BeginMap;
    for (int i = 0; i < kStackKernelClasses; ++i) {
      pair(StackKernelClassName(i), s.kernel_fwd_bytes_per_s[i], s.kernel_bwd_bytes_per_s[i]);
    }
    e << YAML::EndMap;
    e << YAML::Key << "ops" << YAML::Value << YAML::BeginMap;
    for (int i = 0; i < kStackOpKinds; ++i) pair(StackOpKindName(i), s.op_fwd_s[i], s.op_bwd_s[i]);
    e << YAML::EndMap;
    pair("kernel_s", s.kernel_fwd_s, s.kernel_bwd_s);
    if (s.zero3 || s.z3_per_gather_call_s || s.z3_per_bucket_flush_s) {
      e << YAML::Key << "zero3" << YAML::Value << YAML::BeginMap;
      if (s.zero3) {
        e << YAML::Key << "fwd_per_module_s" << YAML::Value << Num(s.z3_fwd_per_module_s);
        e << YAML::Key << "fwd_per_param_s" << YAML::Value << Num(s.z3_fwd_per_param_s);
        e << YAML::Key << "bwd_per_module_s" << YAML::Value << Num(s.z3_bwd_per_module_s);
        e << YAML::Key << "bwd_per_param_s" << YAML::Value << Num(s.z3_bwd_per_param_s);
      }
      if (s.z3_per_gather_call_s) {
        e << YAML::Key << "per_gather_call_s" << YAML::Value << Num(*s.z3_per_gather_call_s);
      }
      if (s.z3_per_bucket_flush_s) {
        e << YAML::Key << "per_bucket_flush_s" << YAML::Value << Num(*s.z3_per_bucket_flush_s);
      }
      e << YAML::EndMap;
    }
    if (s.optimizer_step) {
      e << YAML::Key << "optimizer_step" << YAML::Value << YAML::BeginMap;
      e << YAML::Key << "zero12_s" << YAML::Value << Num(s.z12_step_s);
      e << YAML::Key << "zero12_per_param_s" << YAML::Value << Num(s.z12_step_per_param_s);
      e << YAML::Key << "zero3_s" << YAML::Value << Num(s.z3_step_s);
      e << YAML::Key << "zero3_per_param_s" << YAML::Value << Num(s.z3_step_per_param_s);
      e << YAML::EndMap;
    }
    if (s.bf16_step) {
      e << YAML::Key << "bf16_optimizer_step" << YAML::Value << YAML::BeginMap;
      e << YAML::Key << "step_s" << YAML::Value << Num(s.bf16_step_s);
      e << YAML::Key << "step_per_param_s" << YAML::Value << Num(s.bf16_step_per_param_s);
      e << YAML::Key << "clip_step_s" << YAML::Value << Num(s.bf16_clip_step_s);
      e << YAML::Key << "clip_step_per_param_s" << YAML::Value
        << Num(s.bf16_clip_step_per_param_s);
      e << YAML::EndMap;
    }
    if (s.optimizer_kernels) {
      e << YAML::Key << "optimizer_kernels" << YAML::Value << YAML::BeginMap;
      for (const auto& [name, v] : {std::pair{"fp64_cast", s.fp64_cast_bytes_per_s},
                                    std::pair{"fp64_norm", s.fp64_norm_bytes_per_s},
                                    std::pair{"step_flat", s.step_flat_bytes_per_s},
                                    std::pair{"fused_adam", s.fused_adam_bytes_per_s},
                                    std::pair{"torch_adam", s.torch_adam_bytes_per_s}}) {
        if (v > 0) e << YAML::Key << name << YAML::Value << Num(v);
      }
      e << YAML::EndMap;
    }
    for (const auto& [key, curve] : {std::pair{"cast_copy_d2h", &s.cast_copy_d2h},
                                     std::pair{"cast_copy_d2h_heap", &s.cast_copy_d2h_heap}}) {
      if (curve->empty()) continue;
      e << YAML::Key << key << YAML::Value << YAML::BeginSeq;
      for (const auto& [bytes, sec] : *curve) {
        e << YAML::Flow << YAML::BeginSeq << Num(bytes) << Num(sec) << YAML::EndSeq;
      }
      e << YAML::EndSeq;
    }
    if (!s.blocks.empty()) {
      e << YAML::Key << "blocks" << YAML::Value << YAML::BeginSeq;
      for (const StackBlockPoint& b : s.blocks) {
        e << YAML::Flow << YAML::BeginSeq << b.model_type << (b.encoder ? "encoder" : "decoder")
          << Num(b.fwd_s) << Num(b.bwd_s) << Num(b.ckpt_fwd_s) << Num(b.ckpt_bwd_s) << b.modules
          << b.param_tensors << YAML::EndSeq;
      }
      e << YAML::EndSeq;
    }
    if (!s.rests.empty()) {
      e << YAML::Key << "rests" << YAML::Value << YAML::BeginSeq;
      for (const StackRestPoint& b : s.rests) {
        e << YAML::Flow << YAML::BeginSeq << b.model_type << Num(b.fwd_s) << Num(b.bwd_s)
          << YAML::EndSeq;
      }
      e << YAML::EndSeq;
    }
    if (!s.gemm.empty()) {
      EmitSourceMap(e, "gemm_source", s.gemm_source);
      EmitGemmRows(e, s.gemm);
    }
    e << YAML::EndMap;
  }
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}


// ---- the fast path for GEMM tables ----
//
// A measured profile holds thousands of GEMM rows, each a one-line flow list of plain scalars
// ("    - [bf16, 4096, 1024, 3072, 699657988547714.6, nn]"). yaml-cpp builds a node per cell,
// which made reading h200-measured.yaml take a quarter of a second. The scanner below reads
// such a block itself: it finds "gemm:" under the top-level gpu: (or stack:) key, reads the
// rows that follow while every one is that simple form, and hands yaml-cpp the document with
// the key's value replaced by "[]" and the rows' lines left empty (line numbers unchanged). The
// rows are then checked by the same code as rows read by yaml-cpp (ReadGemmRows), so values
// and messages are the same. Anything the scanner is not sure of (a quoted or null-like cell,
// an anchor, a row over several lines, tabs, CR line ends, a "gemm:" that yaml-cpp does not
// place at gpu.gemm) leaves the whole document to yaml-cpp.

bool IsPlainCellChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '+' ||
         c == '-' || c == '/' || c == ' ';
}

// Reads "- [a, b, c]" (after |indent| spaces, an optional trailing comment) into |row|; false
// when the line is not exactly that form with plain cells.
bool ScanRow(std::string_view line, size_t indent, int line_no, Row* row) {
  if (line.size() < indent + 4 || line.compare(indent, 3, "- [") != 0) return false;
  const size_t close = line.find(']', indent + 3);
  if (close == std::string_view::npos) return false;
  std::string_view rest = line.substr(close + 1);
  size_t k = 0;
  while (k < rest.size() && rest[k] == ' ') ++k;
  if (k < rest.size() && !(rest[k] == '#' && k > 0)) return false;
  std::string_view body = line.substr(indent + 3, close - indent - 3);
  row->list = true;
  row->line = line_no;
  row->cells.clear();
  size_t start = 0;
  while (true) {
    size_t comma = body.find(',', start);
    std::string_view cell = body.substr(start, comma == std::string_view::npos
                                                   ? std::string_view::npos
                                                   : comma - start);
    while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
    while (!cell.empty() && cell.back() == ' ') cell.remove_suffix(1);
    if (cell.empty()) {
      // "[]" is an empty row; an empty cell anywhere else is left to yaml-cpp.
      return comma == std::string_view::npos && row->cells.empty() && start == 0 &&
             body.find_first_not_of(' ') == std::string_view::npos;
    }
    for (char c : cell) {
      if (!IsPlainCellChar(c)) return false;
    }
    // A leading "-", "+" or "." followed by a space, or "- " inside, reads differently in YAML.
    if (cell.find("- ") != std::string_view::npos) return false;
    Cell c;
    c.line = line_no;
    // YAML's null: not a scalar (as yaml-cpp reports it).
    c.scalar = !(cell == "null" || cell == "Null" || cell == "NULL");
    if (c.scalar) c.text = std::string(cell);
    row->cells.push_back(std::move(c));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return true;
}

struct Prescan {
  std::string text;     // the document with the scanned tables' rows taken out
  FastTables tables;
  int gpu_key_line = -1, stack_key_line = -1;
};

// Whether the scanner took a table out of |text|; the rest is in |out|.
bool PrescanGemmTables(const std::string& text, Prescan* out) {
  if (text.find('\r') != std::string::npos || text.find('\t') != std::string::npos) return false;
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos <= text.size();) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string::npos) nl = text.size();
    lines.emplace_back(text.data() + pos, nl - pos);
    pos = nl + 1;
  }
  auto indent_of = [](std::string_view l) {
    size_t i = 0;
    while (i < l.size() && l[i] == ' ') ++i;
    return i;
  };
  auto blank_or_comment = [&](std::string_view l) {
    const size_t i = indent_of(l);
    return i == l.size() || l[i] == '#';
  };
  std::vector<std::pair<size_t, size_t>> cut;  // [first row line, end) per table
  std::vector<size_t> key_lines;
  std::string_view top;
  for (size_t i = 0; i < lines.size(); ++i) {
    std::string_view l = lines[i];
    const size_t ind = indent_of(l);
    if (ind == 0 && !l.empty() && l[0] != '#') {
      const size_t colon = l.find(':');
      top = colon == std::string_view::npos ? std::string_view() : l.substr(0, colon);
      continue;
    }
    if (ind == 0 || (top != "gpu" && top != "stack")) continue;
    std::string_view key = l.substr(ind);
    if (key.compare(0, 5, "gemm:") != 0) continue;
    std::string_view after = key.substr(5);
    const size_t a = after.find_first_not_of(' ');
    if (a != std::string_view::npos && !(after[a] == '#' && a > 0)) continue;
    if (i + 1 >= lines.size()) continue;
    const size_t row_indent = indent_of(lines[i + 1]);
    if (row_indent < ind) continue;
    std::vector<Row>& rows = top == "gpu" ? out->tables.gpu_rows : out->tables.stack_rows;
    bool& seen = top == "gpu" ? out->tables.gpu : out->tables.stack;
    if (seen) return false;  // two tables under one key: yaml-cpp decides
    size_t j = i + 1;
    Row row;
    while (j < lines.size() && indent_of(lines[j]) == row_indent &&
           ScanRow(lines[j], row_indent, static_cast<int>(j), &row)) {
      rows.push_back(std::move(row));
      row = Row();
      ++j;
    }
    if (j == i + 1) continue;
    // What follows must not continue the list or a row: the next line with content is less
    // indented than the key, or at its indent and not a list item.
    size_t next = j;
    while (next < lines.size() && blank_or_comment(lines[next])) ++next;
    if (next < lines.size()) {
      const size_t ni = indent_of(lines[next]);
      if (ni > ind || (ni == ind && lines[next].compare(ni, 1, "-") == 0)) return false;
    }
    seen = true;
    (top == "gpu" ? out->gpu_key_line : out->stack_key_line) = static_cast<int>(i);
    key_lines.push_back(i);
    cut.emplace_back(i + 1, j);
    i = j - 1;
  }
  if (cut.empty()) return false;
  out->text.clear();
  out->text.reserve(text.size() / 8);
  size_t c = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (c < cut.size() && i >= cut[c].first && i < cut[c].second) {
      if (i + 1 == cut[c].second) ++c;
    } else if (c < key_lines.size() && i == key_lines[c]) {
      out->text.append(lines[i].substr(0, indent_of(lines[i])));
      out->text.append("gemm: []");
    } else {
      out->text.append(lines[i]);
    }
    if (i + 1 < lines.size()) out->text.push_back('\n');
  }
  return true;
}

// Whether yaml-cpp placed the emptied table of |section| where the scanner cut it.
bool TablePlaced(const YAML::Node& root, const char* section, int key_line) {
  if (key_line < 0) return true;
  if (!root.IsMap()) return false;
  const YAML::Node s = root[section];
  if (!s.IsMap()) return false;
  const YAML::Node g = s["gemm"];
  return g.IsSequence() && g.size() == 0 && g.Mark().line == key_line;
}

// The document parsed, with the GEMM tables taken out by the scanner where it could.
YAML::Node LoadProfileYaml(const std::string& text, FastTables* fast) {
  Prescan pre;
  if (PrescanGemmTables(text, &pre)) {
    try {
      YAML::Node root = YAML::Load(pre.text);
      if (TablePlaced(root, "gpu", pre.gpu_key_line) &&
          TablePlaced(root, "stack", pre.stack_key_line)) {
        *fast = std::move(pre.tables);
        return root;
      }
    } catch (const YAML::Exception&) {
      // The whole document goes to yaml-cpp below, which reports it as it is.
    }
  }
  *fast = FastTables{};
  return YAML::Load(text);
}

}  // namespace

Result<HardwareProfile> ParseHardwareProfile(const std::string& text, const std::string& source) {
  const std::string file = Escape(source);
  Reader r(file);
  try {
    FastTables fast;
    YAML::Node root = LoadProfileYaml(text, &fast);
    if (!root.IsMap()) {
      return Status::InvalidArgument(
          fmt::format("{}: a hardware profile must be a YAML mapping", file));
    }
    DSPLAN_ASSIGN_OR_RETURN(HardwareProfile p, ReadProfile(r, root, fast));
    p.file = source;
    return p;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(fmt::format("{}: malformed YAML at line {}, column {}: {}",
                                               file, e.mark.line + 1, e.mark.column + 1,
                                               Escape(e.msg, 200)));
  } catch (const std::exception& e) {
    return Status::InvalidArgument(
        fmt::format("{}: cannot be read as YAML: {}", file, Escape(e.what(), 200)));
  }
}

Result<HardwareProfile> LoadHardwareProfile(const std::string& path) {
  DSPLAN_ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, "hardware profile"));
  return ParseHardwareProfile(text, path);
}

Result<std::vector<std::string>> ListHardwareProfiles(const std::string& data_dir) {
  const fs::path dir = fs::path(data_dir) / "profiles";
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return Status::NotFound(fmt::format("no profiles folder at '{}'", dir.string()));
  }
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".yaml") {
      names.push_back(entry.path().stem().string());
    }
  }
  if (ec) return Status::IoError(fmt::format("cannot list '{}': {}", dir.string(), ec.message()));
  std::sort(names.begin(), names.end());
  return names;
}

namespace {

bool IsPath(const std::string& s) {
  return s.find('/') != std::string::npos ||
         (s.size() > 5 && s.substr(s.size() - 5) == ".yaml");
}

// Whether profile text is a node profile (a top-level gpu_profile key), without judging it.
bool LooksLikeNodeProfile(const std::string& text) {
  try {
    FastTables fast;
    YAML::Node root = LoadProfileYaml(text, &fast);
    return root.IsMap() && root["gpu_profile"].IsDefined();
  } catch (const YAML::Exception&) {
    return false;
  }
}

}  // namespace

Result<HardwareProfile> FindHardwareProfile(const std::string& name_or_path,
                                            const std::string& data_dir) {
  const bool is_path = IsPath(name_or_path);
  if (is_path) {
    DSPLAN_ASSIGN_OR_RETURN(std::string text, ReadInputFile(name_or_path, "hardware profile"));
    if (!LooksLikeNodeProfile(text)) return ParseHardwareProfile(text, name_or_path);
    DSPLAN_ASSIGN_OR_RETURN(NodeProfile node, ParseNodeProfile(text, name_or_path));
    if (IsPath(node.gpu_profile)) {
      return Status::InvalidArgument(fmt::format(
          "{}: gpu_profile: {} must name a GPU profile in {}/profiles, not a path",
          Escape(name_or_path), Quote(node.gpu_profile), data_dir));
    }
    DSPLAN_ASSIGN_OR_RETURN(HardwareProfile gpu, FindHardwareProfile(node.gpu_profile, data_dir));
    return ApplyNodeProfile(gpu, node);
  }
  DSPLAN_ASSIGN_OR_RETURN(std::vector<std::string> names, ListHardwareProfiles(data_dir));
  if (std::find(names.begin(), names.end(), name_or_path) == names.end()) {
    const std::vector<std::string> nodes = ListNodeProfiles(data_dir);
    if (std::find(nodes.begin(), nodes.end(), name_or_path) != nodes.end()) {
      DSPLAN_ASSIGN_OR_RETURN(NodeProfile node, FindNodeProfile(name_or_path, data_dir));
      if (IsPath(node.gpu_profile) ||
          std::find(nodes.begin(), nodes.end(), node.gpu_profile) != nodes.end()) {
        return Status::InvalidArgument(fmt::format(
            "{}: gpu_profile: {} must name a GPU profile in {}/profiles", Escape(node.file),
            Quote(node.gpu_profile), data_dir));
      }
      DSPLAN_ASSIGN_OR_RETURN(HardwareProfile gpu, FindHardwareProfile(node.gpu_profile, data_dir));
      return ApplyNodeProfile(gpu, node);
    }
    names.insert(names.end(), nodes.begin(), nodes.end());
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    std::vector<std::string> close = SuggestNames(name_or_path, names);
    std::string hint = close.empty() ? "" : fmt::format(" (did you mean {}?)", close.front());
    return Status::NotFound(fmt::format(
        "unknown hardware profile {}{}; available in {}/profiles: {}", Quote(name_or_path), hint,
        data_dir, list));
  }
  return LoadHardwareProfile((fs::path(data_dir) / "profiles" / (name_or_path + ".yaml")).string());
}

namespace {

// A node profile number: {value: ..., datasheet|measured|assumption: "..."}; |optional| keys
// that are absent read as 0 with no source.
Result<Number> NodeNumber(const Reader& r, const YAML::Node& map, const std::string& key,
                          const char* child, Unit unit, bool optional) {
  if (optional) {
    const YAML::Node n = map[child];
    if (!n.IsDefined() || n.IsNull()) return Number{};
  }
  return r.NumberOf(map, key, child, unit);
}

Result<Number> NodeCount(const Reader& r, const YAML::Node& map, const std::string& key,
                         const char* child, double min, double max, bool optional) {
  DSPLAN_ASSIGN_OR_RETURN(Number n, NodeNumber(r, map, key, child, Unit::kRate, optional));
  const YAML::Node node = map[child];
  if (!(optional && (!node.IsDefined() || node.IsNull())) &&
      (n.value != std::floor(n.value) || n.value < min || n.value > max)) {
    return r.Error(node, key.empty() ? std::string(child) : key + "." + child,
                   fmt::format("must be an integer from {} to {}, got {}", min, max, n.value));
  }
  return n;
}

Result<NodeProfile> ReadNode(const Reader& r, const YAML::Node& root) {
  DSPLAN_RETURN_IF_ERROR(r.CheckMap(root, "(top level)",
                                    {"name", "description", "gpu_profile", "gpus_per_node", "host",
                                     "nvme", "network", "nvlink"}));
  NodeProfile p;
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node name, r.Required(root, "", "name"));
  DSPLAN_ASSIGN_OR_RETURN(p.name, r.String(name, "name"));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node desc, r.Required(root, "", "description"));
  DSPLAN_ASSIGN_OR_RETURN(p.description, r.String(desc, "description"));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node gp, r.Required(root, "", "gpu_profile"));
  DSPLAN_ASSIGN_OR_RETURN(p.gpu_profile, r.String(gp, "gpu_profile"));
  if (p.gpu_profile.empty()) return r.Error(gp, "gpu_profile", "must name a GPU profile");
  DSPLAN_ASSIGN_OR_RETURN(p.gpus_per_node,
                          NodeCount(r, root, "", "gpus_per_node", 1,
                                    static_cast<double>(kMaxGpusPerNode), false));
  DSPLAN_ASSIGN_OR_RETURN(YAML::Node host, r.Required(root, "", "host"));
  DSPLAN_RETURN_IF_ERROR(r.CheckMap(host, "host", {"cores", "ram_bytes", "cpu_adam_per_core",
                                                   "memory_bytes_per_s"}));
  DSPLAN_ASSIGN_OR_RETURN(p.cores, NodeCount(r, host, "host", "cores", 1, 1e6, false));
  DSPLAN_ASSIGN_OR_RETURN(p.ram_bytes, NodeNumber(r, host, "host", "ram_bytes", Unit::kBytes, false));
  DSPLAN_ASSIGN_OR_RETURN(p.cpu_adam_per_core,
                          NodeNumber(r, host, "host", "cpu_adam_per_core", Unit::kRate, true));
  DSPLAN_ASSIGN_OR_RETURN(p.memory_bytes_per_s, NodeNumber(r, host, "host", "memory_bytes_per_s",
                                                           Unit::kBytesPerS, true));
  if ((p.cpu_adam_per_core.value > 0) != (p.memory_bytes_per_s.value > 0)) {
    return r.Error(host, "host",
                   "cpu_adam_per_core and memory_bytes_per_s go together (the CPU Adam rate is "
                   "min(threads x per-core rate, memory bandwidth / 28 bytes)); give both or "
                   "neither");
  }
  if (p.ram_bytes.value <= 0) return r.Error(host, "host.ram_bytes", "must be more than 0");
  const YAML::Node nvme = root["nvme"];
  if (nvme.IsDefined() && !nvme.IsNull()) {
    DSPLAN_RETURN_IF_ERROR(r.CheckMap(nvme, "nvme", {"drives", "drive_capacity_bytes",
                                                     "drive_read_bytes_per_s",
                                                     "drive_write_bytes_per_s"}));
    DSPLAN_ASSIGN_OR_RETURN(p.nvme_drives, NodeCount(r, nvme, "nvme", "drives", 0, 1024, false));
    if (p.nvme_drives.value > 0) {
      DSPLAN_ASSIGN_OR_RETURN(p.nvme_drive_capacity_bytes,
                              NodeNumber(r, nvme, "nvme", "drive_capacity_bytes", Unit::kBytes, false));
      DSPLAN_ASSIGN_OR_RETURN(p.nvme_drive_read_bytes_per_s,
                              NodeNumber(r, nvme, "nvme", "drive_read_bytes_per_s",
                                         Unit::kBytesPerS, false));
      DSPLAN_ASSIGN_OR_RETURN(p.nvme_drive_write_bytes_per_s,
                              NodeNumber(r, nvme, "nvme", "drive_write_bytes_per_s",
                                         Unit::kBytesPerS, false));
      for (const Number* n : {&p.nvme_drive_capacity_bytes, &p.nvme_drive_read_bytes_per_s,
                              &p.nvme_drive_write_bytes_per_s}) {
        if (n->value <= 0) {
          return r.Error(nvme, "nvme", "drive capacity and rates must be more than 0");
        }
      }
    }
  }
  const YAML::Node net = root["network"];
  if (net.IsDefined() && !net.IsNull()) {
    DSPLAN_RETURN_IF_ERROR(
        r.CheckMap(net, "network", {"nic_bytes_per_s_per_gpu", "busbw_efficiency"}));
    DSPLAN_ASSIGN_OR_RETURN(p.nic_bytes_per_s_per_gpu,
                            NodeNumber(r, net, "network", "nic_bytes_per_s_per_gpu",
                                       Unit::kBytesPerS, false));
    DSPLAN_ASSIGN_OR_RETURN(p.nic_busbw_efficiency,
                            NodeNumber(r, net, "network", "busbw_efficiency", Unit::kFraction, false));
    if (p.nic_bytes_per_s_per_gpu.value <= 0 || p.nic_busbw_efficiency.value <= 0) {
      return r.Error(net, "network", "the NIC rate and busbw_efficiency must be more than 0");
    }
  }
  const YAML::Node nvl = root["nvlink"];
  if (nvl.IsDefined() && !nvl.IsNull()) {
    DSPLAN_RETURN_IF_ERROR(r.CheckMap(nvl, "nvlink", {"busbw_bytes_per_s"}));
    DSPLAN_ASSIGN_OR_RETURN(p.intra_node_busbw_bytes_per_s,
                            NodeNumber(r, nvl, "nvlink", "busbw_bytes_per_s", Unit::kBytesPerS, false));
    if (p.intra_node_busbw_bytes_per_s.value <= 0) {
      return r.Error(nvl, "nvlink.busbw_bytes_per_s", "must be more than 0");
    }
  }
  return p;
}

}  // namespace

Result<NodeProfile> ParseNodeProfile(const std::string& text, const std::string& source) {
  const std::string file = Escape(source);
  Reader r(file);
  try {
    YAML::Node root = YAML::Load(text);
    if (!root.IsMap()) {
      return Status::InvalidArgument(fmt::format("{}: a node profile must be a YAML mapping", file));
    }
    DSPLAN_ASSIGN_OR_RETURN(NodeProfile p, ReadNode(r, root));
    p.file = source;
    return p;
  } catch (const YAML::Exception& e) {
    return Status::InvalidArgument(fmt::format("{}: malformed YAML at line {}, column {}: {}",
                                               file, e.mark.line + 1, e.mark.column + 1,
                                               Escape(e.msg)));
  }
}

std::vector<std::string> ListNodeProfiles(const std::string& data_dir) {
  std::vector<std::string> names;
  std::error_code ec;
  const fs::path dir = fs::path(data_dir) / "profiles" / "nodes";
  if (!fs::is_directory(dir, ec)) return names;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && entry.path().extension() == ".yaml") {
      names.push_back(entry.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

Result<NodeProfile> FindNodeProfile(const std::string& name_or_path, const std::string& data_dir) {
  std::string path = name_or_path;
  if (!IsPath(name_or_path)) {
    const std::vector<std::string> names = ListNodeProfiles(data_dir);
    if (std::find(names.begin(), names.end(), name_or_path) == names.end()) {
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      std::vector<std::string> close = SuggestNames(name_or_path, names);
      return Status::NotFound(fmt::format(
          "unknown node profile {}{}; available in {}/profiles/nodes: {}", Quote(name_or_path),
          close.empty() ? "" : fmt::format(" (did you mean {}?)", close.front()), data_dir,
          list.empty() ? "none" : list));
    }
    path = (fs::path(data_dir) / "profiles" / "nodes" / (name_or_path + ".yaml")).string();
  }
  DSPLAN_ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, "node profile"));
  return ParseNodeProfile(text, path);
}

Status WriteHardwareProfile(const HardwareProfile& profile, const std::string& path) {
  std::string text;
  try {
    text = EmitProfile(profile);
  } catch (const YAML::Exception& e) {
    return Status::Internal(fmt::format("cannot emit hardware profile: {}", e.what()));
  }
  // Beside the target, then renamed (core/output_file.h): a failed write leaves nothing half
  // written, and is reported.
  Status w = WriteOutputFile(path, "# dsplan hardware profile (format: docs/profile-format.md)\n" + text);
  if (!w.ok()) return Status::IoError(fmt::format("hardware profile: {}", w.message()));
  return Status();
}

}  // namespace dsplan
