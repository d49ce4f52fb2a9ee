// Tests for kernels/base/read_file.h: a regular file is read whole; a missing path, a directory, a
// FIFO (without blocking), a character device (/dev/zero, read until memory ran out before)
// and a file over the limit are refused, the path and the reason named.
#include "kernels/base/read_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace saturn {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class ReadFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::path(::testing::TempDir()) / "read_file_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path dir_;
};

TEST_F(ReadFileTest, ReadsARegularFileWhole) {
  const std::string path = (dir_ / "a.json").string();
  std::ofstream(path, std::ios::binary) << std::string("{\"a\": 1}\n\0tail", 14);
  absl::StatusOr<std::string> text = ReadFileBounded(path, 14);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, std::string("{\"a\": 1}\n\0tail", 14));
  text = ReadFileBounded((dir_ / "empty").string(), 10);
  EXPECT_EQ(text.status().code(), absl::StatusCode::kNotFound);
  std::ofstream((dir_ / "empty").string());
  text = ReadFileBounded((dir_ / "empty").string(), 10);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "");
}

TEST_F(ReadFileTest, WhatIsNotARegularFileOrTooBigIsRefused) {
  const std::string fifo = (dir_ / "fifo").string();
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::string big = (dir_ / "big").string();
  std::ofstream(big) << std::string(1001, 'x');
  const struct {
    std::string path;
    const char* expect;
  } cases[] = {
      {(dir_ / "missing").string(), "cannot open (No such file or directory)"},
      {dir_.string(), "is a directory, not a file"},
      {fifo, "is a FIFO, not a file"},
      {"/dev/zero", "is a character device, not a file"},
      {big, "is 1001 bytes, over the limit of 1000"},
  };
  for (const auto& c : cases) {
    absl::StatusOr<std::string> text = ReadFileBounded(c.path, 1000);
    ASSERT_FALSE(text.ok()) << c.path;
    EXPECT_THAT(text.status().message(), HasSubstr(c.path + ": " + c.expect));
  }
}

}  // namespace
}  // namespace saturn
