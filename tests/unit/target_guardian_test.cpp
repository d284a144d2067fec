// The guardian's hand-over: links given to it outlive eacgm's own close and are released at its
// clean end. Pipes stand in for link fds: a pipe's read end sees EOF only once every copy of its
// write end is closed, in whichever process holds one.
#include "probes/target_guardian.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <vector>

namespace eacgm {
namespace {

// Whether the pipe's read end sees EOF within `ms`.
bool sees_eof(int read_fd, int ms) {
  pollfd p{read_fd, POLLIN, 0};
  if (poll(&p, 1, ms) <= 0) return false;
  char byte;
  return read(read_fd, &byte, 1) == 0;
}

struct Pipe {
  int read_end = -1, write_end = -1;
  Pipe() {
    int fds[2];
    EXPECT_EQ(pipe(fds), 0);
    read_end = fds[0];
    write_end = fds[1];
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  ~Pipe() {
    close(read_end);
    if (write_end >= 0) close(write_end);
  }
  void close_write_end() {
    close(write_end);
    write_end = -1;
  }
};

TEST(TargetGuardian, HandedOverFdsAreReleasedAtTheCleanEndNotBefore) {
  auto guardian = TargetGuardian::start();
  ASSERT_TRUE(guardian) << guardian.error().message;
  Pipe pipe;
  const int fds[] = {pipe.write_end};
  ASSERT_TRUE(guardian->hand_over(fds));
  pipe.close_write_end();
  // The guardian's copy keeps it open after ours is gone...
  EXPECT_FALSE(sees_eof(pipe.read_end, 300));
  // ...until the clean end.
  guardian = Error{"ended"};  // destroys the guardian handle: the clean end
  EXPECT_TRUE(sees_eof(pipe.read_end, 5000));
}

TEST(TargetGuardian, ManyFdsGoOverInSeveralMessages) {
  auto guardian = TargetGuardian::start();
  ASSERT_TRUE(guardian) << guardian.error().message;
  std::vector<Pipe> pipes(150);  // over the 64 a message carries
  std::vector<int> write_ends;
  for (Pipe& p : pipes) write_ends.push_back(p.write_end);
  ASSERT_TRUE(guardian->hand_over(write_ends));
  for (Pipe& p : pipes) p.close_write_end();
  EXPECT_FALSE(sees_eof(pipes.front().read_end, 200));
  EXPECT_FALSE(sees_eof(pipes.back().read_end, 0));
  guardian = Error{"ended"};
  for (Pipe& p : pipes) EXPECT_TRUE(sees_eof(p.read_end, 5000));
}

TEST(TargetGuardian, WithoutAGuardianNothingIsHandedOver) {
  auto guardian = TargetGuardian::start();
  ASSERT_TRUE(guardian) << guardian.error().message;
  TargetGuardian moved = std::move(*guardian);
  Pipe pipe;
  const int fds[] = {pipe.write_end};
  EXPECT_FALSE(guardian->hand_over(fds));  // moved from: no socket
  EXPECT_TRUE(moved.hand_over(fds));
}

}  // namespace
}  // namespace eacgm
