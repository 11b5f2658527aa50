// grpc_load: a unary gRPC load generator in C++, so that the client's cost does not hide the server's.
//
// One channel (one HTTP/2 connection, as KEDA keeps one per scaler address) shared by --threads threads,
// each making blocking calls back to back for --seconds. Requests are pre-serialized messages read from
// --requests (each a 4-byte big-endian length, then the bytes), sent round robin, so every call can ask
// about a different ScaledObject. Prints one JSON object: calls, errors (non-OK status), seconds, and
// latency percentiles in milliseconds.
//
// Build: g++ -O2 -std=c++17 grpc_load.cc $(pkg-config --cflags --libs grpc++) -o grpc_load
// (Debian: libgrpc++-dev pkg-config; bench/scaler_scale.py builds it when they are present.)

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> ReadRequests(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::string> out;
  unsigned char len[4];
  while (in.read(reinterpret_cast<char*>(len), 4)) {
    size_t n = (size_t(len[0]) << 24) | (size_t(len[1]) << 16) | (size_t(len[2]) << 8) | len[3];
    std::string body(n, '\0');
    if (!in.read(body.data(), static_cast<std::streamsize>(n))) break;
    out.push_back(std::move(body));
  }
  return out;
}

double Percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0.0;
  double h = (v.size() - 1) * q / 100.0;
  size_t lo = static_cast<size_t>(h);
  size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (h - lo) * (v[hi] - v[lo]);
}

}  // namespace

int main(int argc, char** argv) {
  std::string target = "127.0.0.1:6001";
  std::string method = "/externalscaler.ExternalScaler/GetMetrics";
  std::string requests_path;
  int threads = 64;
  double seconds = 10.0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--target") target = v;
    else if (k == "--method") method = v;
    else if (k == "--requests") requests_path = v;
    else if (k == "--threads") threads = std::atoi(v.c_str());
    else if (k == "--seconds") seconds = std::atof(v.c_str());
    else {
      std::fprintf(stderr, "grpc_load: unknown option %s\n", k.c_str());
      return 2;
    }
  }
  std::vector<std::string> requests = ReadRequests(requests_path);
  if (requests.empty() || threads < 1) {
    std::fprintf(stderr, "grpc_load: --requests FILE (length-prefixed messages) and --threads >= 1 needed\n");
    return 2;
  }
  auto channel = grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
    std::fprintf(stderr, "grpc_load: cannot connect to %s\n", target.c_str());
    return 1;
  }
  grpc::internal::RpcMethod rpc(method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC, channel);
  std::vector<grpc::ByteBuffer> bodies;
  for (const auto& r : requests) {
    grpc::Slice slice(r);
    bodies.emplace_back(&slice, 1);
  }
  std::atomic<long> errors{0};
  std::vector<std::vector<double>> latencies(threads);
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      size_t k = static_cast<size_t>(t);
      auto& mine = latencies[t];
      while (Clock::now() < deadline) {
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
        grpc::ByteBuffer response;
        const auto t0 = Clock::now();
        grpc::Status status = grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
            channel.get(), rpc, &ctx, bodies[k % bodies.size()], &response);
        mine.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        if (!status.ok()) errors.fetch_add(1);
        k += static_cast<size_t>(threads);
      }
    });
  }
  for (auto& w : workers) w.join();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> all;
  for (auto& v : latencies) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  double sum = 0.0;
  for (double v : all) sum += v;
  std::printf(
      "{\"calls\": %zu, \"errors\": %ld, \"seconds\": %.3f, \"threads\": %d, \"latency_ms\": "
      "{\"mean\": %.4f, \"p50\": %.4f, \"p90\": %.4f, \"p99\": %.4f, \"max\": %.4f}}\n",
      all.size(), errors.load(), wall, threads, all.empty() ? 0.0 : sum / all.size(), Percentile(all, 50),
      Percentile(all, 90), Percentile(all, 99), all.empty() ? 0.0 : all.back());
  return 0;
}
