// Telling systemd (Type=notify) where the daemon is in its life: READY=1 once the
// mount answers, STOPPING=1 when it starts to go down.
//
// Both are sd_notify(3) messages to $NOTIFY_SOCKET and do nothing when it is unset, so
// a mount started by hand or by mount(8) behaves as before. READY=1 carries MAINPID
// (the daemon is the process that stays) and a STATUS= line `systemctl status` shows.
//
// Thread-safety: thread-safe (each call is one datagram).
#pragma once

#include <string>

namespace epochfs::fs {

void NotifyReady(const std::string& status_line);
void NotifyStopping();

}  // namespace epochfs::fs
