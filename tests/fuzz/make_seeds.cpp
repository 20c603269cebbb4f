// Writes the seed corpora of the fuzz targets that take files as they are, each file a small valid input
// that the fuzzer mutates from: corpus/<target>/<name>. Run by tests/fuzz/make_seeds.sh; the files are
// committed, so a fuzz run needs no generator. (The dataset and checkpoint targets build their files from
// the input, hdf5_edits.hpp: their seeds are inputs libFuzzer found.) Usage: fuzz_make_seeds CORPUS_DIR
#include <png.h>
#include <stdio.h>
// jpeglib.h needs stdio's FILE declared before it.
#include <jpeglib.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/data/dataset_writer.hpp"
#include "core/data/hdf5.hpp"
#include "core/optim/optimizer.hpp"
#include "core/train/checkpoint.hpp"
#include "tests/fuzz/checkpoint_model.hpp"
#include "tests/models/onnx_builder.hpp"

namespace ddl {
namespace {

namespace fs = std::filesystem;
using Bytes = std::vector<std::uint8_t>;

void write(const fs::path& path, const Bytes& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

Bytes read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

Bytes operator+(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Pixels that vary, so that every coefficient and filter type occurs.
Bytes pattern(int h, int w, int channels) {
  Bytes p(static_cast<std::size_t>(h) * w * channels);
  for (std::size_t i = 0; i < p.size(); ++i) p[i] = static_cast<std::uint8_t>(i * 37 + (i / 7) * 11);
  return p;
}

ImageSet image_set(std::size_t n, int h, int w, int classes) {
  ImageSet set{h, w, 3, {}, pattern(static_cast<int>(n) * h, w, 3), {}};
  for (int c = 0; c < classes; ++c) set.class_names.push_back("class" + std::to_string(c));
  for (std::size_t i = 0; i < n; ++i) set.labels.push_back(static_cast<std::int32_t>(i % classes));
  return set;
}

void datasets(const fs::path& dir, const fs::path& scratch) {
  write_image_dataset(image_set(4, 2, 2, 2), (scratch / "a.h5").string(), 1);
  write(dir / "four_2x2_images.h5", read(scratch / "a.h5"));
  write_image_dataset(image_set(3, 4, 3, 3), (scratch / "b.h5").string(), 1);
  write(dir / "three_4x3_images.h5", read(scratch / "b.h5"));
  const auto shards = write_image_dataset(image_set(6, 2, 2, 2), (scratch / "s.h5").string(), 2);
  write(dir / "shard_0_of_2.h5", read(shards[0]));
}

void checkpoints(const fs::path& dir, const fs::path& scratch) {
  Context ctx;
  auto model = fuzz::checkpoint_model(ctx, 0);
  auto adam = make_adam(model->param_count(), {});
  auto sgd = make_sgd(model->param_count(), {.momentum = 0.9f});
  const std::string path = (scratch / "c.h5").string();
  TrainingState state{"fuzz_tiny", 3, 0.5, 1, "model = fuzz_tiny\nepochs = 4\n", 0};
  state.class_names = {"a", "b", "c"};
  state.input_mean = {0.5};
  state.input_std = {0.25};
  save_checkpoint(path, *model, *adam, state);
  write(dir / "adam.h5", read(path));
  save_checkpoint(path, *model, *sgd, {"fuzz_tiny", 1, -1.0, 9, "optimizer = sgd\n", 17});
  write(dir / "sgd_stopped_mid_epoch.h5", read(path));
}

Bytes png(int h, int w, std::uint32_t format, const Bytes& colormap = {}) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(w);
  image.height = static_cast<png_uint_32>(h);
  image.format = format;
  const int channels = PNG_IMAGE_PIXEL_CHANNELS(format);
  const int component = PNG_IMAGE_PIXEL_COMPONENT_SIZE(format);
  if (!colormap.empty()) image.colormap_entries = static_cast<png_uint_32>(colormap.size() / 3);
  const Bytes pixels = pattern(h, w * component, format & PNG_FORMAT_FLAG_COLORMAP ? 1 : channels);
  Bytes pal_pixels = pixels;
  if (!colormap.empty())
    for (auto& p : pal_pixels) p %= static_cast<std::uint8_t>(colormap.size() / 3);
  png_alloc_size_t size = 0;
  png_image_write_to_memory(&image, nullptr, &size, 0, pal_pixels.data(), 0,
                            colormap.empty() ? nullptr : colormap.data());
  Bytes out(size);
  png_image_write_to_memory(&image, out.data(), &size, 0, pal_pixels.data(), 0,
                            colormap.empty() ? nullptr : colormap.data());
  out.resize(size);
  return out;
}

struct JpegSettings {
  J_COLOR_SPACE input = JCS_RGB;
  int components = 3;
  J_COLOR_SPACE stored_as = JCS_YCbCr;
  bool progressive = false, arithmetic = false, optimize = false;
  int restart_rows = 0;
  int quality = 90;
};

Bytes jpeg(int h, int w, const JpegSettings& s) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = s.components;
  cinfo.in_color_space = s.input;
  jpeg_set_defaults(&cinfo);
  jpeg_set_colorspace(&cinfo, s.stored_as);
  jpeg_set_quality(&cinfo, s.quality, TRUE);
  if (s.progressive) jpeg_simple_progression(&cinfo);
  cinfo.arith_code = s.arithmetic;
  cinfo.optimize_coding = s.optimize;
  cinfo.restart_in_rows = s.restart_rows;
  jpeg_start_compress(&cinfo, TRUE);
  const Bytes pixels = pattern(h, w, s.components);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(pixels.data() + cinfo.next_scanline * w * s.components);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  Bytes out(buffer, buffer + size);
  jpeg_destroy_compress(&cinfo);
  std::free(buffer);
  return out;
}

void images(const fs::path& dir) {
  const Bytes plain = {0}, resize = {1}, two_classes = {2};
  write(dir / "baseline.jpg", plain + jpeg(16, 16, {}));
  write(dir / "baseline_resized.jpg", resize + jpeg(9, 13, {.quality = 50}));
  write(dir / "two_classes.jpg", two_classes + jpeg(8, 8, {}));
  write(dir / "progressive.jpg", plain + jpeg(16, 16, {.progressive = true}));
  write(dir / "arithmetic.jpg", plain + jpeg(16, 8, {.arithmetic = true}));
  write(dir / "restarts_optimized.jpg", plain + jpeg(24, 16, {.optimize = true, .restart_rows = 1}));
  write(dir / "grey.jpg", plain + jpeg(8, 16, {.input = JCS_GRAYSCALE, .components = 1, .stored_as = JCS_GRAYSCALE}));
  write(dir / "cmyk.jpg", plain + jpeg(8, 8, {.input = JCS_CMYK, .components = 4, .stored_as = JCS_CMYK}));
  write(dir / "ycck.jpg", plain + jpeg(8, 8, {.input = JCS_CMYK, .components = 4, .stored_as = JCS_YCCK}));
  Bytes truncated = jpeg(16, 16, {});
  truncated.resize(truncated.size() * 2 / 3);
  write(dir / "truncated.jpg", plain + truncated);
  write(dir / "rgb.png", plain + png(8, 8, PNG_FORMAT_RGB));
  write(dir / "rgb_resized.png", resize + png(7, 5, PNG_FORMAT_RGB));
  write(dir / "two_classes.png", two_classes + png(4, 4, PNG_FORMAT_RGB));
  write(dir / "grey_alpha.png", plain + png(8, 8, PNG_FORMAT_GA));
  write(dir / "rgba_16bit.png", plain + png(4, 4, PNG_FORMAT_LINEAR_RGB_ALPHA));
  Bytes colormap;
  for (int i = 0; i < 4; ++i) colormap.insert(colormap.end(), {static_cast<std::uint8_t>(i * 60), 10, 200});
  write(dir / "palette.png", plain + png(8, 8, PNG_FORMAT_RGB_COLORMAP, colormap));
  Bytes cut = png(8, 8, PNG_FORMAT_RGB);
  cut.resize(cut.size() - 20);
  write(dir / "truncated.png", plain + cut);
}

// One CIFAR record: label byte(s), then the R, G and B planes of a 32x32 image.
Bytes cifar_record(const Bytes& labels) { return labels + pattern(32, 32, 3); }

void cifar(const fs::path& dir) {
  write(dir / "cifar10_two_records", Bytes{0} + cifar_record({3}) + cifar_record({9}));
  const std::string names = "airplane\nautomobile\nbird\ncat\ndeer\ndog\nfrog\nhorse\nship\ntruck\n";
  write(dir / "cifar10_named_file",
        Bytes{2 | 4, static_cast<std::uint8_t>(names.size())} + Bytes(names.begin(), names.end()) + cifar_record({1}));
  write(dir / "cifar100_one_record", Bytes{1} + cifar_record({4, 77}));
}

void config_files(const fs::path& dir) {
  const std::vector<std::pair<std::string, std::string>> files = {
      {"readme.cfg", "# a comment\nepochs = 1\nbatch-size = 16\nsteps-per-epoch = 3\noptimizer = sgd\n"},
      {"pipeline.cfg",
       "model = vgg16\npipeline-stages = 3\nmicro-batches = 4\npartition = 5,4,6\nschedule = gpipe\n"
       "batch-size = 8\n"},
      {"normalize.cfg",
       "normalize = meanstd\nmean = 0.485,0.456,0.406\nstd = 0.229,0.224,0.225\nrandom-flip = true\n"
       "random-crop-padding = 4\n[section]\nlr = 1e-2\n"},
      {"training.cfg",
       "lr = 0.05\nlr-schedule = cosine\nwarmup-epochs = 2.5\noptimizer = sgd\nmomentum = 0.9\nnesterov = 1\n"
       "weight-decay = 5e-4\nallreduce = ring\nallreduce-wire = bf16\nbucket-mb = 25\ntimeout = 0\n"
       "threads = 2\nseed = 18446744073709551615\nval-fraction = 0.1\n"},
      {"model.cfg",
       "model = vit_tiny\nimage-size = 48\npatch-size = 8\ndepth = 1\nwidth = 32\nheads = 2\n"
       "dropout = 0.1\nnum-classes = 100\nresume = auto\ncheckpoint-dir = runs/x\n"},
  };
  for (const auto& [name, text] : files) write(dir / name, Bytes(text.begin(), text.end()));
}

// Models as torch.onnx.export writes them: weights in raw_data and float_data, torch's x.view(x.size(0), -1),
// and shape arithmetic on the input's shape.
void onnx_models(const fs::path& dir) {
  for (const auto& [name, model] :
       {std::pair{"tiny_cnn.onnx", onnx_test::tiny_cnn()}, std::pair{"view_cnn_opset17.onnx", onnx_test::view_cnn(17)},
        std::pair{"flatten_by_input_shape.onnx", onnx_test::flatten_by_input_shape()}}) {
    const std::string bytes = onnx_test::bytes_of(model);
    write(dir / name, Bytes(bytes.begin(), bytes.end()));
  }
}

}  // namespace
}  // namespace ddl

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR\n");
    return 2;
  }
  ddl::h5::no_cleanup_at_exit();
  const std::filesystem::path corpus = argv[1];
  const std::filesystem::path scratch = corpus / ".scratch";
  std::filesystem::create_directories(scratch);
  ddl::datasets(corpus / "dataset_bytes", scratch);
  ddl::checkpoints(corpus / "checkpoint_bytes", scratch);
  ddl::images(corpus / "image_folder");
  ddl::cifar(corpus / "cifar_binary");
  ddl::config_files(corpus / "config_file");
  ddl::onnx_models(corpus / "onnx_graph");
  std::filesystem::remove_all(scratch);
  return 0;
}
