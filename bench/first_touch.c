// first_touch: what a read of 112 KB and the XXH3 pass over it cost, into a buffer used
// before or into a fresh one (docs/benchmarks.md, "Reads into buffers used before").
//
//   gcc -O2 -o /tmp/first_touch bench/first_touch.c -lxxhash
//   dd if=/dev/urandom of=/var/tmp/big.bin bs=1M count=240
//   for m in 0 1 2; do echo 3 > /proc/sys/vm/drop_caches; /tmp/first_touch /var/tmp/big.bin $m 2000; done
//
// Modes: 0 O_DIRECT into one reused buffer, 1 O_DIRECT into a fresh buffer per read
// (leaked on purpose, so that none is reused), 2 buffered into one reused buffer.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

static double NowUs(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static char* AlignedBuffer(size_t len) {
  void* p = NULL;
  if (posix_memalign(&p, 4096, len) != 0) {
    perror("posix_memalign");
    exit(1);
  }
  return p;
}

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s FILE MODE(0|1|2) READS\n", argv[0]);
    return 2;
  }
  const int mode = atoi(argv[2]);
  const int reads = atoi(argv[3]);
  const size_t len = 112 * 1024;  // one ~110 KB entry with its header, page-aligned
  const int fd = open(argv[1], O_RDONLY | (mode == 2 ? 0 : O_DIRECT));
  if (fd < 0) {
    perror("open");
    return 1;
  }
  char* reused = AlignedBuffer(len);
  memset(reused, 1, len);  // used before: every page present and touched
  double read_us = 0, hash_us = 0;
  unsigned long long sum = 0;
  for (int i = 0; i < reads; i++) {
    char* buf = mode == 1 ? AlignedBuffer(len) : reused;
    const double a = NowUs();
    if (pread(fd, buf, len, (off_t)i * (off_t)len) != (ssize_t)len) {
      perror("pread");
      return 1;
    }
    const double b = NowUs();
    sum += XXH3_64bits(buf, len);
    read_us += b - a;
    hash_us += NowUs() - b;
  }
  const char* what[] = {"O_DIRECT, reused buffer", "O_DIRECT, fresh buffer",
                        "buffered, reused buffer"};
  printf("%-24s read %6.1f us, hash %6.1f us per %zu B (%llx)\n", what[mode % 3],
         read_us / reads, hash_us / reads, len, sum & 0xff);
  return 0;
}
