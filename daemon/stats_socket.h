// The mount's counters on a unix socket, for `epochfs status` and `epochfs umount`.
//
// Reading `.epochfs/stats` goes through the mount: a path walk, a LOOKUP and a READ, each
// needing a free FUSE worker. When the source hangs (a stopped NFS server, a FUSE source
// whose daemon is stuck), every worker can end up waiting in a source lookup, and a
// `status` or `umount` that reads the stats waits with them, in D state, where not even
// `timeout` can stop it. The socket answers from a thread of its own that never touches
// the source: it accepts, writes the JSON and closes. Its peer credentials also give the
// daemon's pid, which `umount` waits for, without reading anything through the mount.
//
// Where: /run/epochfs/MAJOR-MINOR.sock, named by the mount's device number as mountinfo
// shows it, so a client finds it from the mount table alone. Only a daemon that can
// write /run/epochfs (root) makes one; clients fall back to `.epochfs/stats`. The socket
// is 0600 (0666 with --allow-other, as `.epochfs/stats` is then readable by everyone).
// /run/epochfs is root's and 0755 (made so, or narrowed if an older version left it open),
// so no other user can remove or replace a socket in it; and a client still takes only
// the answer of a peer whose uid is the daemon's (the mount's owner): a socket bound by
// anyone else is refused.
//
// Thread-safety: Start and the destructor from one thread; `render` is called from the
// socket's thread and must be thread-safe.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "base/status.h"
#include "base/unique_fd.h"

namespace epochfs::daemon {

// Where the socket of the mount with device `device` ("major:minor") lives.
std::filesystem::path StatsSocketPath(const std::string& device);

class StatsSocket {
 public:
  // Binds `path` (replacing a stale socket left there by a daemon that died) and starts
  // serving `render()`'s text to every client.
  static Result<std::unique_ptr<StatsSocket>> Start(const std::filesystem::path& path,
                                                    bool everyone,
                                                    std::function<std::string()> render);
  ~StatsSocket();  // stops the thread and removes the socket
  StatsSocket(const StatsSocket&) = delete;
  StatsSocket& operator=(const StatsSocket&) = delete;

 private:
  StatsSocket() = default;
  void Serve();

  std::filesystem::path path_;
  std::function<std::string()> render_;
  UniqueFd listen_fd_;
  UniqueFd stop_fd_;  // eventfd: wakes the thread's poll on shutdown
  std::thread thread_;
};

struct StatsReply {
  pid_t pid = 0;     // the daemon's, from the socket's peer credentials
  std::string text;  // the stats JSON
};

// Asks the daemon behind `path`, which runs as `daemon_uid`. NotFound when no daemon
// listens there (no socket, or a stale one); Permission when the peer is another user's
// process; IoError when it does not answer within `timeout_s`.
Result<StatsReply> QueryStatsSocket(const std::filesystem::path& path, uid_t daemon_uid,
                                    double timeout_s);

}  // namespace epochfs::daemon
