#include "core/collectives.h"

namespace dsplan {

const char* CollectiveName(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllGather: return "all_gather";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kReduce: return "reduce";
    case Collective::kSendRecv: return "send_recv";
  }
  return "?";
}

double BusFactor(Collective c, int n) {
  if (n <= 1) return c == Collective::kBroadcast || c == Collective::kReduce ||
                             c == Collective::kSendRecv
                         ? 1.0
                         : 0.0;
  const double ring = static_cast<double>(n - 1) / n;
  switch (c) {
    case Collective::kAllReduce: return 2 * ring;
    case Collective::kReduceScatter:
    case Collective::kAllGather:
    case Collective::kAllToAll: return ring;
    case Collective::kBroadcast:
    case Collective::kReduce:
    case Collective::kSendRecv: return 1.0;
  }
  return 1.0;
}

double CollectiveSeconds(Collective c, int n, double bytes, double alpha_s,
                         double busbw_bytes_per_s) {
  if (n <= 1 || bytes <= 0) return 0.0;
  return alpha_s + bytes * BusFactor(c, n) / busbw_bytes_per_s;
}

double BusBandwidth(Collective c, int n, double bytes, double seconds) {
  return bytes / seconds * BusFactor(c, n);
}

}  // namespace dsplan
