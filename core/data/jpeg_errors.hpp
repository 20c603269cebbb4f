// libjpeg's error handling as ddl uses it (jpeg_region.cpp decodes, jpeg_encode.cpp encodes): errors jump back
// to the caller's setjmp with a message; the warnings that mean the image data ended early are errors; a
// progressive file of more scans than any encoder writes is refused.
#pragma once

#include <stdio.h>
// jpeglib.h needs stdio's FILE declared before it.
#include <jerror.h>
#include <jpeglib.h>

#include <csetjmp>
#include <cstdio>

namespace ddl::jpeg {

// A progressive JPEG may hold any number of scans, each a pass over the whole image: a small file of
// thousands of them decodes for minutes. libjpeg-turbo's own tools cap them (djpeg -maxscans, TurboJPEG's
// scan limit, 500 in its fuzzers); real encoders write about 10.
inline constexpr int kMaxScans = 500;

// libjpeg reports errors by calling error_exit, which must not return: it jumps back to `jump`.
struct ErrorManager {
  jpeg_error_mgr base;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] inline void fail(j_common_ptr cinfo, const char* message) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  std::snprintf(err->message, sizeof err->message, "%s", message);
  std::longjmp(err->jump, 1);
}

inline void error_exit(j_common_ptr cinfo) {
  char message[JMSG_LENGTH_MAX];
  (*cinfo->err->format_message)(cinfo, message);
  fail(cinfo, message);
}

// libjpeg only warns about most damage and goes on. Image data that ends early (the file does, or a marker
// interrupts it) would become an image whose missing part is grey, which must not end up in a training set
// unnoticed: those warnings are errors. Others (stray bytes between markers) leave the image whole.
inline void emit_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  if (cinfo->err->msg_code == JWRN_JPEG_EOF) fail(cinfo, "the file ends early (truncated)");
  if (cinfo->err->msg_code == JWRN_HIT_MARKER) fail(cinfo, "the image data ends early (truncated or corrupt)");
}

inline void scan_limit(j_common_ptr cinfo) {
  auto* d = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (d->input_scan_number > kMaxScans) fail(cinfo, "more than 500 progressive scans");
}

// Sets up `cinfo`'s error handling and scan limit; call jpeg_create_decompress after the caller's setjmp.
inline void prepare(jpeg_decompress_struct& cinfo, ErrorManager& err, jpeg_progress_mgr& progress) {
  cinfo.err = jpeg_std_error(&err.base);
  err.base.error_exit = error_exit;
  err.base.emit_message = emit_message;
  err.message[0] = '\0';
  progress.progress_monitor = scan_limit;
}

// CMYK (and YCCK, which libjpeg turns into CMYK) to RGB, in place: pixel x's 4 bytes are read before
// pixel x's 3 are written, and 3x <= 4x, so nothing is overwritten before it is read. Adobe's encoders
// (the source of nearly every CMYK JPEG) store the values inverted and say so with their marker.
inline void cmyk_row_to_rgb(unsigned char* row, std::size_t width, bool inverted) {
  for (std::size_t x = 0; x < width; ++x) {
    const unsigned char* in = row + 4 * x;
    const unsigned ink = inverted ? in[3] : 255u - in[3];  // 255 - K: how much light the black ink lets through
    unsigned char rgb[3];
    for (int c = 0; c < 3; ++c) {
      const unsigned light = inverted ? in[c] : 255u - in[c];
      rgb[c] = static_cast<unsigned char>((light * ink + 127) / 255);
    }
    for (int c = 0; c < 3; ++c) row[3 * x + c] = rgb[c];
  }
}

}  // namespace ddl::jpeg
