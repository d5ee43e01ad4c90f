// A QEMU TCG plugin for rdma/count-insns.sh: counts how often each
// translated block runs, kernel and user alike, so that a guest tool's
// instructions per round trip can be told apart from another's. The guest
// asks for a snapshot by creating DIR/req-NAME (DIR shared with the host);
// the plugin answers with DIR/snap-NAME: one line "vaddr n_insns execs" per
// block run so far. Counts are exact with `-accel tcg,thread=single` (with
// several vCPU threads two may add to one counter at once).
//
//   cc -O2 -shared -fPIC -o build/tbcount.so rdma/tbcount.c -lpthread
//   qemu-system-x86_64 ... -plugin build/tbcount.so,arg=dir=DIR
//
// QEMU ships its plugin API as one header that Debian does not package;
// the few declarations below are that API's, version 1 (QEMU 7.2, Debian 12).
#include <dirent.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef uint64_t qemu_plugin_id_t;
typedef struct {
  const char *target_name;
  struct { int min, cur; } version;
  bool system_emulation;
  union { struct { int smp_vcpus, max_vcpus; } system; };
} qemu_info_t;
struct qemu_plugin_tb;
enum qemu_plugin_op { QEMU_PLUGIN_INLINE_ADD_U64 };
void qemu_plugin_register_vcpu_tb_trans_cb(qemu_plugin_id_t, void (*)(qemu_plugin_id_t, struct qemu_plugin_tb *));
void qemu_plugin_register_vcpu_tb_exec_inline(struct qemu_plugin_tb *, enum qemu_plugin_op, void *, uint64_t);
size_t qemu_plugin_tb_n_insns(const struct qemu_plugin_tb *);
uint64_t qemu_plugin_tb_vaddr(const struct qemu_plugin_tb *);
__attribute__((visibility("default"))) int qemu_plugin_version = 1;

// Open addressing on (vaddr, length): a block retranslated with another
// length is another block. 4 M entries (96 MiB) hold a whole boot's kernel.
#define CAP (1u << 22)
typedef struct { uint64_t vaddr, n_insns, execs; } block_t;
static block_t *blocks;
static uint32_t used;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char dir[512];

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
  (void)id;
  const uint64_t va = qemu_plugin_tb_vaddr(tb), n = qemu_plugin_tb_n_insns(tb);
  pthread_mutex_lock(&mu);
  uint64_t h = ((va * 0x9E3779B97F4A7C15ull) ^ n) & (CAP - 1);
  while (blocks[h].n_insns && !(blocks[h].vaddr == va && blocks[h].n_insns == n)) h = (h + 1) & (CAP - 1);
  if (!blocks[h].n_insns) {
    if (used + 1 >= CAP) abort();  // full: no count may silently go missing
    blocks[h].vaddr = va;
    blocks[h].n_insns = n;
    used++;
  }
  pthread_mutex_unlock(&mu);
  qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &blocks[h].execs, 1);
}

static void snapshot(const char *name) {
  char tmp[1024], snap[1024];
  snprintf(tmp, sizeof tmp, "%s/.snap-%s", dir, name);
  snprintf(snap, sizeof snap, "%s/snap-%s", dir, name);
  FILE *f = fopen(tmp, "w");
  if (!f) return;
  for (uint32_t i = 0; i < CAP; i++)
    if (blocks[i].execs) fprintf(f, "%" PRIx64 " %" PRIu64 " %" PRIu64 "\n", blocks[i].vaddr, blocks[i].n_insns, blocks[i].execs);
  if (fclose(f) == 0) rename(tmp, snap);  // whole or not at all
}

static void *watch(void *arg) {
  (void)arg;
  char req[1024];
  for (;;) {
    usleep(10000);
    DIR *d = opendir(dir);
    if (!d) continue;
    for (struct dirent *e; (e = readdir(d));) {
      if (strncmp(e->d_name, "req-", 4) || strchr(e->d_name, '/')) continue;
      snapshot(e->d_name + 4);
      snprintf(req, sizeof req, "%s/%s", dir, e->d_name);
      unlink(req);
    }
    closedir(d);
  }
  return NULL;
}

__attribute__((visibility("default"))) int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
                                                               char **argv) {
  (void)info;
  if (argc != 1 || strncmp(argv[0], "dir=", 4)) {
    fprintf(stderr, "tbcount: wants arg=dir=DIR\n");
    return -1;
  }
  snprintf(dir, sizeof dir, "%s", argv[0] + 4);
  if (!(blocks = calloc(CAP, sizeof *blocks))) return -1;
  qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
  pthread_t t;
  return pthread_create(&t, NULL, watch, NULL) == 0 ? 0 : -1;
}
