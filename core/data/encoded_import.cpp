#include "core/data/encoded_import.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

#include "core/data/channel_statistics.hpp"
#include "core/data/dataset_format.hpp"
#include "core/data/dataset_writer.hpp"
#include "core/data/encoded_writer.hpp"
#include "core/data/image_decode.hpp"
#include "core/data/image_resize.hpp"
#include "core/data/image_set.hpp"
#include "core/data/jpeg_encode.hpp"
#include "core/data/jpeg_region.hpp"
#include "core/error.hpp"

namespace ddl {
namespace {

constexpr std::size_t kBatchFiles = 256;
constexpr std::size_t kStatisticsImages = 1000;  // the channel statistics' sample, from the shuffled order

// A JPEG whose data was cut short would decode with a grey bottom: its end-of-image marker (FF D9) must be
// there, after at most some padding that encoders and cameras leave.
bool ends_whole(const std::vector<std::uint8_t>& b) {
  std::size_t end = b.size();
  while (end > 2 && b[end - 1] == 0x00) --end;
  return end >= 4 && b[end - 2] == 0xFF && b[end - 1] == 0xD9;
}

// One file as the dataset keeps it.
EncodedImage encode_file(const std::string& path, std::int32_t label, const EncodedImportOptions& o, bool& reencoded,
                         std::uint64_t& input_bytes) {
  EncodedImage image;
  image.label = label;
  image.bytes = read_file(path);
  input_bytes = image.bytes.size();
  reencoded = false;
  if (is_jpeg(image.bytes)) {
    const JpegSize size = jpeg_size(image.bytes, path);
    if (!ends_whole(image.bytes))
      throw InputError(path + ": corrupt JPEG (the file ends early: no end-of-image marker)");
    image.height = size.height;
    image.width = size.width;
    if (o.max_side <= 0 || std::max(size.height, size.width) <= o.max_side) return image;
  }
  // A PNG, or a JPEG larger than --max-side: decoded (a large JPEG at the DCT scale that keeps max_side),
  // resized, and written as JPEG.
  DecodedImage pixels;
  if (is_jpeg(image.bytes)) {
    const float h = static_cast<float>(image.height), w = static_cast<float>(image.width);
    const JpegRegion region = decode_jpeg_region(image.bytes, {0, 0, h, w}, o.max_side, o.max_side, path);
    pixels = region.pixels;
  } else {
    pixels = decode_image(path);
  }
  int height = pixels.height, width = pixels.width;
  if (o.max_side > 0 && std::max(height, width) > o.max_side) {
    const double f = static_cast<double>(o.max_side) / std::max(height, width);
    height = std::max(1, static_cast<int>(std::lround(height * f)));
    width = std::max(1, static_cast<int>(std::lround(width * f)));
    pixels.rgb =
        resize_image(pixels.rgb.data(), pixels.height, pixels.width, 3,
                     {0, 0, static_cast<float>(pixels.height), static_cast<float>(pixels.width)}, height, width);
  }
  image.bytes = encode_jpeg(pixels.rgb.data(), height, width, o.quality);
  image.height = height;
  image.width = width;
  reencoded = true;
  return image;
}

// An image decoded at 1/8 scale into `sums`: the statistics of a large set without decoding it.
void add_small(ChannelStatistics& sums, const EncodedImage& image, const std::string& name) {
  const float h = static_cast<float>(image.height), w = static_cast<float>(image.width);
  const JpegRegion small = decode_jpeg_region(image.bytes, {0, 0, h, w}, std::max(1, image.height / 16),
                                              std::max(1, image.width / 16), name);
  sums.add(small.pixels.rgb);
}

class Importer {
 public:
  Importer(const ImageFolderListing& listing, const EncodedImportOptions& o,
           const std::function<void(std::size_t, std::size_t)>& progress)
      : listing_(listing), o_(o), progress_(progress) {}

  EncodedImportResult run() {
    const std::size_t n = listing_.files.size();
    if (!(o_.val_fraction >= 0 && o_.val_fraction < 1)) throw InputError("--val-fraction must be in [0, 1)");
    if (o_.quality < 1 || o_.quality > 100) throw InputError("--quality must be in [1, 100]");
    const std::vector<std::size_t> order = shuffled_order(n, o_.seed);
    const auto n_val = static_cast<std::size_t>(o_.val_fraction * static_cast<double>(n));
    if (o_.val_fraction > 0 && n_val == 0)
      throw InputError("--val-fraction " + std::to_string(o_.val_fraction) + " of " + std::to_string(n) +
                       " images holds out nothing");
    if (static_cast<std::size_t>(o_.shards) > n - n_val || o_.shards < 1)
      throw InputError("cannot split " + std::to_string(n - n_val) + " images into " + std::to_string(o_.shards) +
                       " shards");
    try {
      write_part({order.begin() + static_cast<std::ptrdiff_t>(n_val), order.end()}, o_.output, o_.shards);
      if (n_val > 0) write_part({order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n_val)}, o_.val_output, 1);
    } catch (...) {
      remove_files(result_.written);  // half a dataset is none
      throw;
    }
    result_.train = n - n_val;
    result_.val = n_val;
    return result_;
  }

 private:
  void write_part(const std::vector<std::size_t>& images, const std::string& path, int shards) {
    ChannelStatistics sums(3);
    std::vector<std::pair<std::string, std::unique_ptr<EncodedShardWriter>>> writers;
    for (int s = 0; s < shards; ++s) {
      const std::size_t begin = images.size() * s / shards, end = images.size() * (s + 1) / shards;
      const std::string file = dataset_format::shard_path(path, s, shards);
      std::unique_ptr<EncodedShardWriter> writer;
      for (std::size_t at = begin; at < end; at += kBatchFiles) {
        const std::vector<std::size_t> batch(
            images.begin() + static_cast<std::ptrdiff_t>(at),
            images.begin() + static_cast<std::ptrdiff_t>(std::min(end, at + kBatchFiles)));
        // The statistics' sample: images of the part's first kStatisticsImages, in the shuffled order.
        const std::size_t sampled = at < kStatisticsImages ? std::min(batch.size(), kStatisticsImages - at) : 0;
        std::vector<EncodedImage> encoded = encode_batch(batch, sampled, sums);
        if (!writer)  // chunks of about one image of the first batch: a read touches little besides its image
          writer = std::make_unique<EncodedShardWriter>(file, ShardPlace{s, shards, begin, images.size()},
                                                        listing_.class_names, chunk_bytes(encoded));
        writer->append(encoded);
        done_ += batch.size();
        if (progress_) progress_(done_, listing_.files.size());
      }
      result_.stored_bytes += writer->bytes();
      writers.emplace_back(file, std::move(writer));
    }
    // Every shard carries the whole part's statistics, known once all its images went by.
    for (auto& [file, writer] : writers) {
      writer->finish(sums.mean(), sums.stddev());
      result_.written.push_back(file);
    }
  }

  // The batch's files as stored, on the workers; the first `sampled` also decoded small into `sums`.
  std::vector<EncodedImage> encode_batch(const std::vector<std::size_t>& batch, std::size_t sampled,
                                         ChannelStatistics& sums) {
    std::vector<EncodedImage> out(batch.size());
    std::vector<ChannelStatistics> sample(sampled, ChannelStatistics(3));
    std::vector<char> reencoded(batch.size(), 0);
    std::vector<std::uint64_t> input(batch.size(), 0);
    std::exception_ptr failure;
    std::mutex failure_mutex;
    const auto workers = static_cast<std::size_t>(std::max(1, o_.threads));
    const auto work = [&](std::size_t first) {
      for (std::size_t i = first; i < batch.size(); i += workers) {
        try {
          bool again = false;
          out[i] = encode_file(listing_.files[batch[i]], listing_.labels[batch[i]], o_, again, input[i]);
          reencoded[i] = again;
          if (i < sampled) add_small(sample[i], out[i], listing_.files[batch[i]]);
        } catch (...) {
          std::lock_guard lock(failure_mutex);
          if (!failure) failure = std::current_exception();
          return;
        }
      }
    };
    {
      std::vector<std::jthread> threads;
      for (std::size_t t = 0; t < workers; ++t) threads.emplace_back(work, t);
    }
    if (failure) std::rethrow_exception(failure);
    for (const ChannelStatistics& one : sample) sums.merge(one);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      result_.reencoded += reencoded[i] != 0;
      result_.input_bytes += input[i];
    }
    return out;
  }

  static std::size_t chunk_bytes(const std::vector<EncodedImage>& images) {
    std::size_t total = 0;
    for (const auto& image : images) total += image.bytes.size();
    const std::size_t mean = total / std::max<std::size_t>(images.size(), 1);
    std::size_t chunk = 4096;
    while (chunk < mean && chunk < (std::size_t{256} << 10)) chunk *= 2;
    return chunk;
  }

  const ImageFolderListing& listing_;
  const EncodedImportOptions& o_;
  const std::function<void(std::size_t, std::size_t)>& progress_;
  EncodedImportResult result_;
  std::size_t done_ = 0;
};

}  // namespace

EncodedImportResult import_encoded(const ImageFolderListing& listing, const EncodedImportOptions& options,
                                   const std::function<void(std::size_t, std::size_t)>& progress) {
  return Importer(listing, options, progress).run();
}

}  // namespace ddl
