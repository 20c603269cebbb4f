#include "core/crc32c.hpp"

#include <gtest/gtest.h>

#include <string>

namespace ddl {
namespace {

// The check value of the CRC catalogue and RFC 3720's (iSCSI's) test vectors.
TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string ascending;
  for (int i = 0; i < 32; ++i) ascending += static_cast<char>(i);
  EXPECT_EQ(crc32c(ascending), 0x46DD794Eu);
}

}  // namespace
}  // namespace ddl
