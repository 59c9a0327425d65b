// Clang thread-safety annotations, and a mutex that carries them.
//
// The annotations let clang's -Wthread-safety check at compile time that a member
// marked GUARDED_BY(mu_) is only touched with mu_ held, and that a method marked
// REQUIRES(mu_) is only called with it held. tests/run.sh builds the libraries with
// clang and -Werror=thread-safety, so a violation fails CI. On GCC every macro
// expands to nothing and Mutex/MutexLock cost what std::mutex/std::unique_lock cost.
//
// libstdc++'s std::mutex carries no annotations, so the analysis cannot see it being
// locked: guarded state must sit behind base::Mutex and be locked with MutexLock.
// MutexLock wraps std::unique_lock, so waits still use a plain std::condition_variable
// (no condition_variable_any and its extra internal mutex). Write waits as a loop
// around MutexLock::Wait: a predicate lambda is analysed as a separate function that
// does not hold the lock.
//
// Thread safety: Mutex is a mutex; a MutexLock belongs to the thread that made it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>

#if defined(__clang__)
#define EPOCHFS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define EPOCHFS_THREAD_ANNOTATION(x)
#endif

// On a class: instances are capabilities (locks) the analysis tracks.
#define CAPABILITY(x) EPOCHFS_THREAD_ANNOTATION(capability(x))
// On a class: an RAII object that acquires a capability and releases it when destroyed.
#define SCOPED_CAPABILITY EPOCHFS_THREAD_ANNOTATION(scoped_lockable)
// On a member: reading or writing it requires holding x.
#define GUARDED_BY(x) EPOCHFS_THREAD_ANNOTATION(guarded_by(x))
// On a pointer member: dereferencing it requires holding x.
#define PT_GUARDED_BY(x) EPOCHFS_THREAD_ANNOTATION(pt_guarded_by(x))
// On a mutex member: the lock order, checked only with -Wthread-safety-beta.
#define ACQUIRED_BEFORE(...) EPOCHFS_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) EPOCHFS_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
// On a function: callers must hold the capabilities (exclusively / at least shared).
#define REQUIRES(...) EPOCHFS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) EPOCHFS_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
// On a function: it acquires / releases the capabilities and does not undo that.
#define ACQUIRE(...) EPOCHFS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) EPOCHFS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) EPOCHFS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// On a function: callers must not hold the capabilities (it takes them itself).
#define EXCLUDES(...) EPOCHFS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// On a function: tells the analysis the capability is held from here on.
#define ASSERT_CAPABILITY(x) EPOCHFS_THREAD_ANNOTATION(assert_capability(x))
// On a function: it returns a reference to the capability x.
#define RETURN_CAPABILITY(x) EPOCHFS_THREAD_ANNOTATION(lock_returned(x))
// On a function: the analysis skips its body. Say in a comment why it is safe.
#define NO_THREAD_SAFETY_ANALYSIS EPOCHFS_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace epochfs {

// A std::mutex the analysis can see. Lock it with MutexLock; Lock()/Unlock() exist
// for the few places that cannot use a scope.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

  // For code the analysis cannot follow (a callback known to run under the lock).
  // Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope, like std::unique_lock: it can be released and taken
// again inside the scope, and it can wait on a std::condition_variable.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : lock_(mu->mu_) {}
  // Takes over a lock already held (Mutex::TryLock succeeded).
  MutexLock(Mutex& mu, std::adopt_lock_t) REQUIRES(mu) : lock_(mu.mu_, std::adopt_lock) {}
  ~MutexLock() RELEASE() = default;
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  // Drops the lock early, for work that must not run under it.
  void Unlock() RELEASE() { lock_.unlock(); }
  // Takes it again after Unlock().
  void Lock() ACQUIRE() { lock_.lock(); }

  // Releases the lock while blocked, holds it again on return. Wakes spuriously:
  // call in a loop that checks the condition.
  void Wait(std::condition_variable& cv) { cv.wait(lock_); }
  template <class Rep, class Period>
  std::cv_status WaitFor(std::condition_variable& cv,
                         const std::chrono::duration<Rep, Period>& timeout) {
    return cv.wait_for(lock_, timeout);
  }
  template <class Clock, class Duration>
  std::cv_status WaitUntil(std::condition_variable& cv,
                           const std::chrono::time_point<Clock, Duration>& deadline) {
    return cv.wait_until(lock_, deadline);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace epochfs
