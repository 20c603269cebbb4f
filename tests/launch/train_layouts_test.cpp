// ddl_train's parallel layouts against one rank with the same global batch: data parallelism, pipelines
// and grids of them, split (tensor-parallel) layers, in f32 and bf16; checkpoints that move between
// layouts; the bytes split layers send; layouts that are refused.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "tests/launch/process_test_fixture.hpp"

namespace ddl {
namespace {

TEST_F(DdlTrain, SameResultWithAndWithoutMpirun) {
  const std::string plain = scratch_ / "plain", mpi = scratch_ / "mpi";
  ASSERT_EQ(run(kTrain + train_args("--epochs 1 --threads 1 --checkpoint-dir " + plain)).exit_code, 0);
  const auto r = run(kMpirun + " -np 1 " + kTrain + train_args("--epochs 1 --threads 1 --checkpoint-dir " + mpi));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(params(plain + "/last.h5"), params(mpi + "/last.h5"));
}

TEST_F(DdlTrain, RanksMatchOneRankWithTheGlobalBatch) {
  // Plain SGD: N ranks x batch 64/N average their gradients into the step of 1 rank x batch 64; only the
  // order of float sums differs (oneDNN's reductions over fewer images, the all-reduce's order). Four
  // steps, because such 1e-8 differences eventually flip one ReLU or max-pool decision for one pixel,
  // after which that layer's gradient moves by 1e-4: with buckets, 8 steps once ended 2e-4 apart, every
  // difference in one output channel of conv2 (and in conv1 below it), none in the dense layers.
  const std::string sgd = "--epochs 1 --optimizer sgd --momentum 0 --lr 0.05 --threads 1 --steps-per-epoch 4 ";
  const std::string one = scratch_ / "one";
  ASSERT_EQ(run(kTrain + train_args(sgd + "--batch-size 64 --checkpoint-dir " + one)).exit_code, 0);
  const auto a = params(one + "/last.h5");
  struct Layout {
    int ranks;
    std::string allreduce;
  };
  const Layout layouts[] = {
      {2, "--allreduce hier"}, {4, "--allreduce ring --bucket-mb 0.05"}, {4, "--allreduce mpi --bucket-mb 0"}};
  for (const Layout& l : layouts) {
    const std::string dir = scratch_ / ("layout" + std::to_string(&l - &layouts[0]));
    const auto r = run(
        kMpirun + " -np " + std::to_string(l.ranks) + " " + kTrain +
        train_args(sgd + l.allreduce + " --batch-size " + std::to_string(64 / l.ranks) + " --checkpoint-dir " + dir));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("ranks " + std::to_string(l.ranks)), std::string::npos);
    EXPECT_NE(r.out.find("global 64"), std::string::npos);
    EXPECT_NE(r.out.find("MB all-reduced/step"), std::string::npos) << r.out;
    const auto b = params(dir + "/last.h5");
    ASSERT_EQ(a.size(), b.size());
    double worst = 0;
    for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
    std::cout << l.ranks << " ranks, " << l.allreduce << ": largest parameter difference " << worst << "\n";
    EXPECT_LT(worst, 1e-5) << l.ranks << " ranks, " << l.allreduce;
  }
}

double train_loss(const std::string& out) {
  const auto pos = out.find("train loss ");
  return pos == std::string::npos ? -1.0 : std::stod(out.substr(pos + 11));
}

double val_loss(const std::string& out) {
  const auto pos = out.find("val loss ");
  return pos == std::string::npos ? -1.0 : std::stod(out.substr(pos + 9));
}

// Pipelines and grids of them against one rank with the same global batch: plain SGD, no dropout. The
// one-rank reference splits its batch into the same micro-batches, so BatchNorm (resnet18) normalises
// over the same images; without BatchNorm (seed_cnn) the micro-batches change only the order of sums.
// A pipeline of one replica sums in the one-rank order, bit for bit; a grid's all-reduce does not, and
// resnet18's BatchNorm over 8 images amplifies such rounding quickly (one rank with --threads 2 instead
// of 1 already ends these 3 steps with a loss 1e-4 away, after 4 steps 3e-3), hence its looser tolerance
// (the 2 x 2 grid, on an AMD EPYC: 3.7e-5 on oneDNN 2.6, 5.2e-4 on oneDNN 3.7).
void expect_layouts_match_one_rank(DdlTrain& t, const std::string& model_args, int global_batch, int reference_micro,
                                   int micro, double tolerance) {
  const std::string sgd = model_args + " --epochs 1 --optimizer sgd --momentum 0 --lr 0.01 --threads 1 "
                                       "--steps-per-epoch 3 --seed 3 ";
  const std::string one = t.scratch() / "one";
  const auto ref = t.run(kTrain + t.train_args(sgd + "--batch-size " + std::to_string(global_batch) +
                                               " --micro-batches " + std::to_string(reference_micro) +
                                               " --checkpoint-dir " + one));
  ASSERT_EQ(ref.exit_code, 0) << ref.err;
  const auto a = t.params(one + "/last.h5");
  struct Layout {
    int replicas, stages, micro;
    std::string schedule;
  };
  const Layout layouts[] = {{1, 2, micro, "gpipe"}, {1, 3, micro, "1f1b"}, {2, 2, micro / 2, "1f1b"}};
  for (const Layout& l : layouts) {
    const std::string dir = t.scratch() / ("grid" + std::to_string(l.replicas) + "x" + std::to_string(l.stages));
    const auto r =
        t.run(kMpirun + " -np " + std::to_string(l.replicas * l.stages) + " " + kTrain +
              t.train_args(sgd + "--batch-size " + std::to_string(global_batch / l.replicas) + " --pipeline-stages " +
                           std::to_string(l.stages) + " --micro-batches " + std::to_string(l.micro) + " --schedule " +
                           l.schedule + " --checkpoint-dir " + dir));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("grid " + std::to_string(l.replicas) + " x " + std::to_string(l.stages)), std::string::npos)
        << r.out;
    const double worst = largest_difference(a, t.params(dir + "/last.h5"));
    std::cout << l.replicas << " x " << l.stages << " (" << l.schedule << ", " << l.micro
              << " micro-batches): largest parameter difference " << worst << ", loss " << train_loss(r.out)
              << " vs " << train_loss(ref.out) << "\n";
    EXPECT_LT(worst, tolerance) << l.replicas << " x " << l.stages;
    EXPECT_NEAR(train_loss(r.out), train_loss(ref.out), 1e-3) << r.out;
  }
}

TEST_F(DdlTrain, PipelinesMatchOneRankForSeedCnn) {
  expect_layouts_match_one_rank(*this, "--model seed_cnn", 32, 1, 4, 1e-5);
}

// In bf16 the stages' messages are bf16 (half the bytes): activations rounded as between two bf16 layers
// of one rank, but gradients at the cut rounded where one rank's may stay f32, hence a bf16 tolerance.
TEST_F(DdlTrain, Bf16PipelinesMatchOneRankForSeedCnn) {
  if (!cpu_computes_bf16()) return;  // ddl_train refuses bf16 there (Bf16TracksF32AndItsCheckpoints... checks)
  expect_layouts_match_one_rank(*this, "--model seed_cnn --precision bf16", 32, 1, 4, 1e-3);
}

TEST_F(DdlTrain, PipelinesMatchOneRankForResnet18) {
  expect_layouts_match_one_rank(*this, "--model resnet18 --image-size 64", 32, 4, 4, 1e-3);
}

TEST_F(DdlTrain, CheckpointOfOneLayoutResumesInAnother) {
  // Adam (per-parameter moments and a step count in the checkpoint); one replica sums in one order
  // whatever the cut, so the runs agree bit for bit.
  const std::string args = "--model seed_cnn --optimizer adam --threads 1 --steps-per-epoch 3 --batch-size 16 "
                           "--micro-batches 2 ";
  const std::string straight = scratch_ / "straight", cut = scratch_ / "cut";
  ASSERT_EQ(run(kTrain + train_args(args + "--epochs 2 --checkpoint-dir " + straight)).exit_code, 0);
  const auto two = run(kMpirun + " -np 2 " + kTrain +
                       train_args(args + "--epochs 1 --pipeline-stages 2 --checkpoint-dir " + cut));
  ASSERT_EQ(two.exit_code, 0) << two.err;
  const auto three = run(kMpirun + " -np 3 " + kTrain +
                         train_args(args + "--epochs 2 --pipeline-stages 3 --partition 2,2,3 --resume auto "
                                           "--checkpoint-dir " + cut));
  ASSERT_EQ(three.exit_code, 0) << three.err;
  EXPECT_NE(three.out.find("resumed from"), std::string::npos) << three.out;
  EXPECT_NE(three.out.find("stage 2: layers 4-6 (--partition)"), std::string::npos) << three.out;
  EXPECT_EQ(params(straight + "/last.h5"), params(cut + "/last.h5"));
}

// "0.23 MB all-reduced/step" of the last epoch line.
std::string reduced_per_step(const std::string& out) {
  const auto end = out.rfind(" MB all-reduced/step");
  if (end == std::string::npos) return "";
  const auto begin = out.rfind(' ', end - 1);
  return out.substr(begin + 1, end - begin - 1);
}

TEST_F(DdlTrain, ShardedStateAndGradientsTrainAsUnshardedAndTheirCheckpointsResumeEitherWay) {
  // ZeRO's stage 1: the ring's reduce-scatter leaves in each replica's shard the sums the ring's all-reduce
  // gives there, so the parameters equal an unsharded run's bit for bit (--allreduce ring on both sides),
  // for the same bytes a step; a pipeline's stages each shard their own state across their replicas. Stage 2
  // reduces each bucket (a small one here, so that there are several and pieces of several owners) to its
  // owners in the ring's order during backward: the same bits again, on the bucket thread of plain data
  // parallelism and on a pipeline's own thread. Stage 3 gathers each layer's parameters from their owners
  // before it runs (the all-gather's values) instead of all-gathering after the update: the same bits, for
  // half an all-reduce more a micro-batch. With layers split across 2 ranks (2 x 1 x 2), each rank shards its
  // flat buffer, split slices included, across its replica, and the whole layers' gradients are averaged over
  // the split group in the shard only: the same bits again (2 ranks sum alike in either order), and on
  // 2 x 2 x 2, every axis at once. The classifier's rows are one run of the file; ViT-tiny's blocks, split by
  // columns and rows, cut the file's arrays with a stride, which the shards cut again, at a block or within
  // one. A checkpoint holds the shards in the single-rank format: written sharded, it resumes unsharded, and
  // back.
  struct Case {
    std::string ranks, layout, optimizer;
    bool through_checkpoints;
  };
  const Case cases[] = {{"2", "--batch-size 16", "--optimizer adam", true},
                        {"4", "--batch-size 8", "--optimizer sgd --momentum 0.9 --lr 0.05", false},
                        {"4", "--batch-size 16 --pipeline-stages 2 --micro-batches 2",
                         "--optimizer sgd --momentum 0.9 --lr 0.05", true},
                        {"4", "--batch-size 8 --tensor-parallel 2", "--optimizer adam", true},
                        {"4", "--model vit_tiny --tensor-split blocks --batch-size 8 --tensor-parallel 2",
                         "--optimizer adam", true},
                        {"8", "--batch-size 8 --tensor-parallel 2 --pipeline-stages 2 --micro-batches 2",
                         "--optimizer adam", false}};
  const std::string stages[] = {"--shard-state 1", "--shard-state 2 --bucket-mb 0.1", "--shard-state 3 --bucket-mb 0.1"};
  for (const Case& c : cases) {
    const std::string name = std::to_string(&c - &cases[0]);
    const std::string train = kMpirun + " -np " + c.ranks + " " + kTrain;
    auto args = [&](const std::string& more) {
      return train_args(c.layout + " " + c.optimizer + " --allreduce ring --threads 1 --steps-per-epoch 3 " + more);
    };
    const std::string plain = scratch_ / ("plain" + name);
    const auto a = run(train + args("--epochs 2 --checkpoint-dir " + plain));
    ASSERT_EQ(a.exit_code, 0) << a.err;
    for (const std::string& stage : stages) {
      const std::string sharded = scratch_ / ("sharded" + name + stage.substr(14, 1));
      const auto b = run(train + args("--epochs 2 " + stage + " --checkpoint-dir " + sharded));
      ASSERT_EQ(b.exit_code, 0) << b.err;
      EXPECT_NE(b.out.find("its state sharded"), std::string::npos) << b.out;
      EXPECT_NE(b.out.find(" (ring, f32)\n"), std::string::npos) << b.out;
      EXPECT_EQ(params(plain + "/last.h5"), params(sharded + "/last.h5")) << c.ranks << " ranks, " << c.layout << ", " << stage;
      // The shards written by every replica in turn make up the unsharded run's state.
      const bool adam = c.optimizer.find("adam") != std::string::npos;
      for (const std::string& state : adam ? std::vector<std::string>{"m", "v"} : std::vector<std::string>{"velocity"}) {
        h5::Handle p = h5::open_file(plain + "/last.h5"), s = h5::open_file(sharded + "/last.h5");
        EXPECT_EQ(h5::read_dataset<float>(p, "optimizer_state/" + state, plain),
                  h5::read_dataset<float>(s, "optimizer_state/" + state, sharded)) << state << ", " << stage;
      }
      if (stage != stages[2])
        EXPECT_EQ(reduced_per_step(a.out), reduced_per_step(b.out)) << b.out;
      else
        EXPECT_GT(std::stod(reduced_per_step(b.out)), 1.4 * std::stod(reduced_per_step(a.out))) << b.out;
    }
    if (!c.through_checkpoints) continue;
    const std::pair<std::string, std::string> moves[] = {
        {"--shard-state 1", "--shard-state 0"}, {"--shard-state 0", "--shard-state 1"}, {stages[1], "--shard-state 0"},
        {stages[2], "--shard-state 0"}, {"--shard-state 0", stages[2]}};
    for (std::size_t move = 0; move < std::size(moves); ++move) {
      const auto& [first, then] = moves[move];
      const std::string dir = scratch_ / ("move " + std::to_string(move));
      ASSERT_EQ(run(train + args("--epochs 1 " + first + " --checkpoint-dir '" + dir + "'")).exit_code, 0);
      const auto resumed = run(train + args("--epochs 2 --resume auto " + then + " --checkpoint-dir '" + dir + "'"));
      ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
      EXPECT_NE(resumed.out.find("resumed from"), std::string::npos) << resumed.out;
      EXPECT_EQ(params(plain + "/last.h5"), params(dir + "/last.h5")) << first << ", then " << then;
    }
  }
  // One replica has nothing to shard: the run says so, rather than drop the option unseen.
  const auto alone = run(kTrain + train_args("--shard-state 2 --epochs 1 --steps-per-epoch 1 --threads 1"));
  ASSERT_EQ(alone.exit_code, 0) << alone.err;
  EXPECT_NE(alone.out.find("--shard-state 2: nothing to shard, the layout has one replica (1 x 1 x 1)\n"),
            std::string::npos)
      << alone.out;
}

TEST_F(DdlTrain, LayerwiseOptimizersShardTheirStateWithWholeLayersNorms) {
  // LARS's and LAMB's trust ratios take a whole array's norms: sharded, each replica sums the squares of its
  // pieces, and the sums are added over the replicas (seed_cnn's dense layer straddles the shards of 2
  // replicas). The sums' order differs from an unsharded run's, so the parameters and state agree within
  // 1e-6 relative, not bit for bit; through a checkpoint written sharded and resumed unsharded too. On 4
  // ranks as 2 x 2, each stage's replicas shard its own arrays.
  const auto close = [](const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
    ASSERT_EQ(a.size(), b.size()) << what;
    std::size_t off = 0;
    for (std::size_t i = 0; i < a.size(); ++i)
      if (std::abs(a[i] - b[i]) > 1e-6f * std::max(std::abs(a[i]), std::abs(b[i])) + 1e-9f) ++off;
    EXPECT_EQ(off, 0u) << what << ": " << off << " of " << a.size() << " values differ by more than 1e-6";
  };
  struct Case {
    std::string ranks, optimizer, state, layout;
  };
  const Case cases[] = {{"2", "--optimizer lars --lars-trust 0.02 --lr 0.5 --weight-decay 5e-4", "lars_velocity", ""},
                        {"2", "--optimizer lamb --lr 0.01 --weight-decay 0.01", "lamb_m", ""},
                        {"4", "--optimizer lamb --lr 0.01", "lamb_v", "--pipeline-stages 2 --micro-batches 2"}};
  for (const Case& c : cases) {
    const std::string train = kMpirun + " -np " + c.ranks + " " + kTrain;
    const std::string name = c.optimizer.substr(12, 4) + c.ranks;
    auto args = [&](const std::string& more) {
      return train_args(c.optimizer + " " + c.layout + " --batch-size 8 --allreduce ring --threads 1 " +
                        "--steps-per-epoch 3 " + more);
    };
    const std::string plain = scratch_ / ("plain " + name);
    const auto a = run(train + args("--epochs 2 --checkpoint-dir '" + plain + "'"));
    ASSERT_EQ(a.exit_code, 0) << a.err;
    for (const std::string stage : {"--shard-state 1", "--shard-state 2 --bucket-mb 0.1", "--shard-state 3"}) {
      const std::string sharded = scratch_ / (name + stage);
      const auto b = run(train + args("--epochs 2 " + stage + " --checkpoint-dir '" + sharded + "'"));
      ASSERT_EQ(b.exit_code, 0) << b.err;
      EXPECT_NE(b.out.find("its state sharded"), std::string::npos) << b.out;
      const std::string what = c.optimizer + " " + c.layout + ", " + stage;
      close(params(plain + "/last.h5"), params(sharded + "/last.h5"), what);
      h5::Handle p = h5::open_file(plain + "/last.h5"), q = h5::open_file(sharded + "/last.h5");
      close(h5::read_dataset<float>(p, "optimizer_state/" + c.state, plain),
            h5::read_dataset<float>(q, "optimizer_state/" + c.state, sharded), what + ", " + c.state);
    }
    const std::string moved = scratch_ / ("moved " + name);
    ASSERT_EQ(run(train + args("--epochs 1 --shard-state 2 --checkpoint-dir '" + moved + "'")).exit_code, 0);
    const auto resumed = run(train + args("--epochs 2 --resume auto --shard-state 0 --checkpoint-dir '" + moved + "'"));
    ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
    close(params(plain + "/last.h5"), params(moved + "/last.h5"), c.optimizer + ", resumed unsharded");
  }
}

TEST_F(DdlTrain, ShardedParametersGivenBackAndGatheredAgainTrainAsWholeOnes) {
  // The seed model's 1.1 MB of parameters fit one 2 MB block, which stage 3 never gives back: resnet18_cifar's
  // 45 MB are given back layer by layer and gathered again, in forward, in recomputed forwards and in backward,
  // for each of 2 micro-batches, in bf16 where the CPU computes it (else f32: ddl_train refuses bf16 there).
  const std::string args = std::string(" --model resnet18_cifar --optimizer adam --allreduce ring --threads 1 ") +
                           "--batch-size 8 --steps-per-epoch 2 --epochs 1 --recompute --micro-batches 2 " +
                           (cpu_computes_bf16() ? "--precision bf16 " : "--precision f32 ");
  const std::string whole = scratch_ / "whole", sharded = scratch_ / "sharded";
  const auto a = run(kMpirun + " -np 2 " + kTrain + train_args(args + "--checkpoint-dir " + whole));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const auto b = run(kMpirun + " -np 2 " + kTrain + train_args(args + "--shard-state 3 --bucket-mb 1 --checkpoint-dir " + sharded));
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.out.find("each layer's parameters gathered from their owners"), std::string::npos) << b.out;
  EXPECT_EQ(params(whole + "/last.h5"), params(sharded + "/last.h5"));
}

TEST_F(DdlTrain, RecomputedActivationsTrainAsStoredOnes) {
  // The forward run again before backward is the first forward bit for bit, with BatchNorm (seed_cnn_bn)
  // and dropout (vit_tiny), on replicas and in a pipeline's stages with micro-batches in flight.
  const std::string cases[] = {
      "-np 2 " + kTrain + " --model seed_cnn_bn --batch-size 8",
      "-np 2 " + kTrain + " --model vit_tiny --depth 3 --width 48 --heads 3 --dropout 0.1 --batch-size 8 "
                          "--pipeline-stages 2 --micro-batches 2"};
  for (const std::string& c : cases) {
    const std::string name = std::to_string(&c - &cases[0]);
    const std::string stored = scratch_ / ("stored" + name), recomputed = scratch_ / ("recomputed" + name);
    const std::string args = "--optimizer sgd --momentum 0.9 --lr 0.05 --threads 1 --steps-per-epoch 3 --epochs 1 ";
    const auto a = run(kMpirun + " " + c + train_args(args + "--checkpoint-dir " + stored));
    ASSERT_EQ(a.exit_code, 0) << a.err;
    const auto b = run(kMpirun + " " + c + train_args(args + "--recompute --checkpoint-dir " + recomputed));
    ASSERT_EQ(b.exit_code, 0) << b.err;
    EXPECT_NE(b.out.find("activations recomputed"), std::string::npos) << b.out;
    EXPECT_EQ(params(stored + "/last.h5"), params(recomputed + "/last.h5")) << c;
  }
}

TEST_F(DdlTrain, CheckpointOfSplitLayersResumesInEveryLayout) {
  // Through split layers and back: T = 2, S = 2, D = 2 with its gradients and momentum sharded, D = 2 x T = 2
  // with its momentum sharded (shards that cut the split layers' strided slices), one rank, an epoch each.
  // The split layers' slices and their momentum go into the single-rank file and are cut from it again. SGD with momentum:
  // a change of layout changes the order of float sums (below 1e-6 here), which Adam's normalised steps
  // can amplify on near-zero gradients to 4e-4 in 15 steps (an unchanged layout resumes bit for bit).
  // Two steps an epoch: in more, such differences can flip one ReLU or max-pool decision (with 3 steps
  // an epoch, 27 weights of one conv1 channel moved 6e-6 in the second epoch, and 4e-3 by the fifth).
  const std::string args = "--model seed_cnn --optimizer sgd --momentum 0.9 --lr 0.05 --threads 1 "
                           "--steps-per-epoch 2 ";
  const std::string straight = scratch_ / "straight", chain = scratch_ / "chain";
  ASSERT_EQ(run(kTrain + train_args(args + "--epochs 5 --batch-size 16 --micro-batches 2 --checkpoint-dir " +
                                    straight)).exit_code, 0);
  const std::string layouts[] = {"-np 2 " + kTrain + " --batch-size 8 --tensor-parallel 2",
                                 "-np 2 " + kTrain + " --batch-size 16 --micro-batches 2 --pipeline-stages 2",
                                 "-np 2 " + kTrain + " --batch-size 8 --shard-state 2 --bucket-mb 0.1",
                                 "-np 4 " + kTrain + " --batch-size 4 --tensor-parallel 2 --shard-state 1",
                                 "-np 1 " + kTrain + " --batch-size 16 --micro-batches 2"};
  for (int epoch = 1; epoch <= 5; ++epoch) {
    const auto r = run(kMpirun + " " + layouts[epoch - 1] +
                       train_args(args + "--epochs " + std::to_string(epoch) + " --resume auto --checkpoint-dir " + chain));
    ASSERT_EQ(r.exit_code, 0) << layouts[epoch - 1] << "\n" << r.err;
    if (epoch > 1) {
      EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
    }
  }
  const double worst = largest_difference(params(straight + "/last.h5"), params(chain + "/last.h5"));
  std::cout << "five layouts, an epoch each: largest parameter difference " << worst << "\n";
  EXPECT_LT(worst, 1e-6);

  // A transformer's blocks, split by columns and rows (strided slices of the file), T = 2, 1, 4.
  const std::string vit = "--model vit_tiny --optimizer sgd --momentum 0.9 --lr 0.01 --threads 1 --steps-per-epoch 3 "
                          "--batch-size 16 --tensor-split blocks ";
  const std::string vit_straight = scratch_ / "vit_straight", vit_chain = scratch_ / "vit_chain";
  ASSERT_EQ(run(kTrain + train_args(vit + "--epochs 3 --checkpoint-dir " + vit_straight)).exit_code, 0);
  for (int epoch = 1; epoch <= 3; ++epoch) {
    const int tensor = epoch == 1 ? 2 : epoch == 2 ? 1 : 4;
    const auto r = run(kMpirun + " -np " + std::to_string(tensor) + " " + kTrain +
                       train_args(vit + "--tensor-parallel " + std::to_string(tensor) + " --epochs " +
                                  std::to_string(epoch) + " --resume auto --checkpoint-dir " + vit_chain));
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  const double vit_worst = largest_difference(params(vit_straight + "/last.h5"), params(vit_chain + "/last.h5"));
  std::cout << "vit_tiny, T = 2, 1, 4: largest parameter difference " << vit_worst << "\n";
  EXPECT_LT(vit_worst, 1e-6);
}

// Dense layers split across tensor groups against one rank with the same global batch: plain SGD, no
// dropout. The reference runs its batch in as many micro-batches as the layout has batches below the
// split (ranks bringing their own images, times micro-batches), so the convolutions see the same
// batches: oneDNN's kernels sum in another order for another batch size, which after 3 steps of
// alexnet_cifar differs by 1.4e-4 (as plain data parallelism does), against 3e-8 this way.
TEST_F(DdlTrain, SplitLayersMatchOneRank) {
  struct Layout {
    std::string model;
    int replicas, stages, tensor, micro;
    std::string cut = "";  // --partition
  };
  // With the cut 6,1 the gathering layer sits on the first stage, whose output is then the group's batch
  // in training and its own in evaluation.
  const Layout layouts[] = {{"seed_cnn", 1, 1, 2, 1},
                            {"alexnet_cifar --dropout 0", 1, 1, 2, 1},
                            {"seed_cnn", 2, 1, 2, 1},
                            {"seed_cnn", 1, 2, 2, 2},
                            {"seed_cnn", 1, 2, 2, 2, " --partition 6,1"},
                            {"seed_cnn", 1, 1, 4, 1},
                            {"vit_tiny --tensor-split blocks", 1, 1, 2, 1},
                            {"vit_tiny --tensor-split blocks", 2, 1, 2, 1},
                            {"vit_tiny --tensor-split blocks", 1, 2, 2, 2}};
  const int global = 32;
  for (const Layout& l : layouts) {
    const std::string sgd = "--model " + l.model + " --epochs 1 --optimizer sgd --momentum 0 --lr 0.01 --threads 1 "
                            "--steps-per-epoch 3 --seed 3 ";
    // Split blocks share their group's batch; split dense layers gather one from every rank.
    const bool shared = l.model.find("blocks") != std::string::npos;
    const int data_ranks = shared ? l.replicas : l.replicas * l.tensor;
    const std::string name = std::to_string(&l - &layouts[0]);
    const auto ref = run(kTrain + train_args(sgd + "--batch-size " + std::to_string(global) + " --micro-batches " +
                                             std::to_string(data_ranks * l.micro) + " --checkpoint-dir " +
                                             (scratch_ / ("one" + name))));
    ASSERT_EQ(ref.exit_code, 0) << ref.err;
    const std::string grid = std::to_string(l.replicas) + " x " + std::to_string(l.stages) + " x " +
                             std::to_string(l.tensor);
    const auto r = run(kMpirun + " -np " + std::to_string(l.replicas * l.stages * l.tensor) + " " + kTrain +
                       train_args(sgd + "--batch-size " + std::to_string(global / data_ranks) + " --pipeline-stages " +
                                  std::to_string(l.stages) + " --micro-batches " + std::to_string(l.micro) +
                                  " --tensor-parallel " + std::to_string(l.tensor) + l.cut + " --checkpoint-dir " +
                                  (scratch_ / ("split" + name))));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("grid " + grid + " (replicas x stages x tensor-parallel)"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("global 32"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(shared ? "the group shares one batch" : "the group's batch is gathered"), std::string::npos)
        << r.out;
    if (l.tensor == 4) {  // seed_cnn's 10 classes
      EXPECT_NE(r.out.find("whole on every rank: 6 (10 outputs), which 4 does not divide"), std::string::npos) << r.out;
    }
    const double worst = largest_difference(params(scratch_ / ("one" + name) + "/last.h5"),
                                            params(scratch_ / ("split" + name) + "/last.h5"));
    std::cout << l.model << ", " << grid << ": largest parameter difference " << worst << ", loss "
              << train_loss(r.out) << " vs " << train_loss(ref.out) << "\n";
    EXPECT_LT(worst, 1e-5) << l.model << ", " << grid;
    EXPECT_NEAR(train_loss(r.out), train_loss(ref.out), 1e-4) << r.out;
    EXPECT_NEAR(val_loss(r.out), val_loss(ref.out), 1e-4) << r.out;
  }
}

// The bytes one rank sends to its tensor group each step, counted as ring algorithms send them, for
// seed_cnn's dense layers (4096->64, then 64->10 when T divides 10, else whole on every rank) split over T
// ranks of b images each: forward, the features (T - 1) b 4096, each split layer's output share
// (T - 1) T b out / T, the labels (T - 1) b; backward, the second layer's input gradient all-reduced when
// it is split, 2 (T - 1) / T x T b 64, the features' gradient reduce-scattered, (T - 1) b 4096; and the
// gradients of the whole parameters averaged over the group, 2 (T - 1) / T of them: the 19,392 of the
// convolutions, and the second layer's 650 when it stays whole. Four bytes a value.
double seed_cnn_tensor_bytes(int T, int b) {
  const double t = T, n = b;
  const bool second_split = 10 % T == 0;
  const double forward = (t - 1) * n * 4096 + (t - 1) * n * (64 + (second_split ? 10 : 0)) + (t - 1) * n;
  const double backward = (second_split ? 2 * (t - 1) / t * t * n * 64 : 0) + (t - 1) * n * 4096;
  const double whole = 2 * (t - 1) / t * (19392 + (second_split ? 0 : 650));
  return 4 * (forward + backward + whole);
}

// For vit_tiny's blocks split over T ranks sharing a batch of b images: each of the 4 pairs of split
// linear layers (attention and MLP of 2 blocks) all-reduces one [b, 65, 64] activation in forward and one
// in backward; the gradients of the 8,906 whole parameters (embeddings, LayerNorms, the biases added after
// the row splits' sums, the head) are averaged over the group; 2 (T - 1) / T of each sent by each rank.
double vit_tiny_tensor_bytes(int T, int b) { return 4.0 * 2.0 * (T - 1) / T * (4 * 2 * b * 65 * 64 + 8906); }

TEST_F(DdlTrain, SplitLayersReportTheBytesTheySend) {
  struct Layout {
    std::string model;
    int replicas, tensor, batch;
    double bytes;
  };
  const Layout layouts[] = {{"seed_cnn", 1, 2, 16, seed_cnn_tensor_bytes(2, 16)},
                            {"seed_cnn", 2, 2, 8, seed_cnn_tensor_bytes(2, 8)},
                            {"seed_cnn", 1, 4, 8, seed_cnn_tensor_bytes(4, 8)},
                            {"vit_tiny --tensor-split blocks", 1, 2, 16, vit_tiny_tensor_bytes(2, 16)},
                            {"vit_tiny --tensor-split blocks", 1, 4, 8, vit_tiny_tensor_bytes(4, 8)}};
  for (const Layout& l : layouts) {
    const auto r = run(kMpirun + " -np " + std::to_string(l.replicas * l.tensor) + " " + kTrain +
                       train_args("--model " + l.model + " --epochs 1 --steps-per-epoch 2 --threads 1 --batch-size " +
                                  std::to_string(l.batch) + " --tensor-parallel " + std::to_string(l.tensor)));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    char expected[64];
    std::snprintf(expected, sizeof expected, "tensor group %.0f bytes/step sent per rank", l.bytes);
    EXPECT_NE(r.out.find(expected), std::string::npos) << expected << "\n" << r.out;
  }
}

TEST_F(DdlTrain, BadLayoutsAreRefusedOnEveryRank) {
  expect_every_rank_refuses(run(kMpirun + " -np 3 " + kTrain + train_args("--pipeline-stages 2")), 3,
                            "3 ranks do not form a grid of replicas x 2 pipeline stages");
  expect_every_rank_refuses(run(kMpirun + " -np 8 " + kTrain + train_args("--pipeline-stages 8 --threads 1")), 8,
                            "8 pipeline stages for model seed_cnn of 7 layers");
  expect_every_rank_refuses(run(kMpirun + " -np 2 " + kTrain + train_args("--pipeline-stages 2 --partition 3,3")), 2,
                            "--partition 3,3 covers 6 layers, the model has 7");
  expect_clean_error(run(kTrain + train_args("--pipeline-stages 3 --partition 3,4")),
                     "--partition gives 2 stages, --pipeline-stages is 3");
  expect_clean_error(run(kTrain + train_args("--batch-size 30 --micro-batches 4")),
                     "--batch-size 30 does not split into 4 micro-batches");
  expect_clean_error(run(kTrain + train_args("--schedule zigzag")), "--schedule must be gpipe or 1f1b");
  expect_every_rank_refuses(run(kMpirun + " -np 3 " + kTrain + train_args("--tensor-parallel 2")), 3,
                            "3 ranks do not form a grid of replicas x 1 pipeline stages x 2 tensor-parallel ranks");
  expect_every_rank_refuses(run(kMpirun + " -np 2 " + kTrain + train_args("--tensor-parallel 2 --tensor-split 2")), 2,
                            "--tensor-split 2: layer 2 of seed_cnn (conv2d 32->64 k3 s1 p1 +relu) is neither a dense layer nor a "
                            "transformer block");
  expect_every_rank_refuses(run(kMpirun + " -np 4 " + kTrain + train_args("--tensor-parallel 4 --tensor-split 5,6")),
                            4, "--tensor-parallel 4 does not divide the 10 outputs of layer 6");
  expect_every_rank_refuses(run(kMpirun + " -np 2 " + kTrain + train_args("--tensor-parallel 2 --tensor-split 5,x")),
                            2, "--tensor-split must be classifier, blocks or layer indices such as 9,11, not '5,x'");
  expect_every_rank_refuses(run(kMpirun + " -np 2 " + kTrain + train_args("--tensor-parallel 2 --tensor-split blocks")),
                            2, "--tensor-split blocks: model seed_cnn has no transformer blocks");
  expect_every_rank_refuses(
      run(kMpirun + " -np 3 " + kTrain + train_args("--model vit_tiny --tensor-parallel 3 --tensor-split blocks")), 3,
      "encoder 0 attention cannot be split: linear 64->192 (3 groups): 3 ranks do not split its 64 features evenly");
  expect_every_rank_refuses(
      run(kMpirun + " -np 2 " + kTrain + train_args("--model vit_tiny --tensor-parallel 2 --tensor-split 1,7")), 2,
      "--tensor-split 1,7: layer 7 of vit_tiny (linear 64->10) is neither a dense layer nor a transformer block");
  expect_every_rank_refuses(run(kMpirun + " -np 2 " + kTrain + train_args("--tensor-parallel 2 --tensor-split 7")),
                            2, "--tensor-split 7: model seed_cnn has layers 0-6");
}

TEST_F(DdlTrain, Bf16RanksMatchOneRankWithTheGlobalBatch) {
  // bf16 rounds each image's values alone, and the mean's 1/64 or 1/32 scale is a power of two, which
  // rounding commutes with: only the order of f32 sums differs, as in f32.
  const std::string sgd = "--epochs 1 --optimizer sgd --momentum 0 --lr 0.05 --threads 1 --steps-per-epoch 8 "
                          "--precision bf16 ";
  const std::string one = scratch_ / "one", two = scratch_ / "two";
  const auto single = run(kTrain + train_args(sgd + "--batch-size 64 --checkpoint-dir " + one));
  if (bf16_refused(single)) return;
  ASSERT_EQ(single.exit_code, 0) << single.err;
  const auto pair = run(kMpirun + " -np 2 " + kTrain + train_args(sgd + "--batch-size 32 --checkpoint-dir " + two));
  ASSERT_EQ(pair.exit_code, 0) << pair.err;
  const auto a = params(one + "/last.h5"), b = params(two + "/last.h5");
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  std::cout << "bf16, 2 ranks: largest parameter difference " << worst << "\n";
  EXPECT_LT(worst, 1e-5);
}

}  // namespace
}  // namespace ddl
