// Bus bandwidth, 2 (N - 1) / N x bytes / time, of the ring, hierarchical and MPI_Allreduce all-reduces,
// side by side in one run, for buffers of 4 KiB to 256 MiB. Run under mpirun with the rank count to
// measure; rank 0 prints one line per size. Time is the slowest rank's, median of the repetitions.
//   mpirun -np 4 build/bench/allreduce_bandwidth [max_mib=256] [wire=f32|bf16]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "comm/allreduce.hpp"
#include "comm/mpi_environment.hpp"

int main(int argc, char** argv) {
  using namespace ddl;
  MpiEnvironment mpi(&argc, &argv);
  Communicator comm;
  const std::size_t max_bytes = (argc > 1 ? std::stoul(argv[1]) : 256) << 20;
  const WireType wire = argc > 2 && std::string(argv[2]) == "bf16" ? WireType::bf16 : WireType::f32;
  const int n = comm.size();
  std::vector<std::unique_ptr<Allreducer>> reducers;
  for (auto a : {AllreduceAlgorithm::ring, AllreduceAlgorithm::hierarchical, AllreduceAlgorithm::mpi})
    reducers.push_back(
        std::make_unique<Allreducer>(comm, AllreduceOptions{a, a == AllreduceAlgorithm::ring ? wire : WireType::f32}));
  if (comm.rank() == 0)
    std::printf("ranks %d, wire %s; bus bandwidth GB/s\n%12s %10s %10s %10s\n", n,
                wire == WireType::bf16 ? "bf16" : "f32", "bytes", "ring", "hier", "mpi");
  for (std::size_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    double gbs[3];
    for (std::size_t a = 0; a < reducers.size(); ++a) {
      const int reps = static_cast<int>(std::clamp<std::size_t>((256u << 20) / bytes, 3, 200));
      std::vector<double> times;
      for (int r = 0; r < reps + 1; ++r) {
        comm.barrier();
        const auto t0 = std::chrono::steady_clock::now();
        reducers[a]->run(data, ReduceOp::sum);
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::vector<double> all = {t};
        MPI_Allreduce(MPI_IN_PLACE, all.data(), 1, MPI_DOUBLE, MPI_MAX, comm.get());
        if (r > 0) times.push_back(all[0]);  // the first call allocates windows and warms up
      }
      std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
      gbs[a] = n > 1 ? 2.0 * (n - 1) / n * bytes / times[times.size() / 2] / 1e9 : 0.0;
    }
    if (comm.rank() == 0) std::printf("%12zu %10.2f %10.2f %10.2f\n", bytes, gbs[0], gbs[1], gbs[2]);
  }
  return 0;
}
