// An exclusive claim on a folder for the life of a process: two runs given the same --checkpoint-dir
// would rename each other's files away mid-write. flock(2) on a lock file inside it; the kernel drops the
// lock when the process ends, however it ends, so a crashed run never leaves the folder claimed. The
// file names the holder (process id and host) for the other run's message.
#pragma once

#include <string>

namespace ddl {

class DirectoryLock {
 public:
  // Throws InputError naming the process that holds it.
  explicit DirectoryLock(const std::string& dir);
  ~DirectoryLock();
  DirectoryLock(const DirectoryLock&) = delete;
  DirectoryLock& operator=(const DirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace ddl
