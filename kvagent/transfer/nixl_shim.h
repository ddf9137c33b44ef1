// A C face for NIXL's C++ agent API (nixl.h), for cgo. Built only with
// -tags nixl (nixl_shim.cpp, nixl.go). Every function returns a
// nixl_status_t value: 0 success, 1 in progress, negative errors.
#ifndef KVGATE_NIXL_SHIM_H
#define KVGATE_NIXL_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct kvg_nixl kvg_nixl;

// kvg_nixl_new creates an agent (with a progress thread) and one backend
// plugin (e.g. "UCX") with the plugin's default parameters overridden by
// keys/vals. On failure *err is a malloc'ed message.
int kvg_nixl_new(const char *name, const char *backend, const char **keys, const char **vals, int nparams, kvg_nixl **out, char **err);
void kvg_nixl_free(kvg_nixl *a);

// kvg_nixl_register registers (or, with dereg set, deregisters) one
// contiguous buffer of memory type mem (nixl_mem_t).
int kvg_nixl_register(kvg_nixl *a, int mem, uintptr_t addr, size_t len, uint64_t dev, int dereg);

// kvg_nixl_local_md returns getLocalMD's blob in a malloc'ed buffer.
int kvg_nixl_local_md(kvg_nixl *a, void **data, size_t *len);
// kvg_nixl_load_md loads a peer's blob; *name is malloc'ed.
int kvg_nixl_load_md(kvg_nixl *a, const void *data, size_t len, char **name);
int kvg_nixl_invalidate(kvg_nixl *a, const char *remote);

// kvg_nixl_create_xfer is createXferReq over n local and n remote
// descriptors (op: 0 NIXL_READ, 1 NIXL_WRITE).
int kvg_nixl_create_xfer(kvg_nixl *a, int op,
                         int lmem, const uintptr_t *laddr, const size_t *llen, const uint64_t *ldev,
                         int rmem, const uintptr_t *raddr, const size_t *rlen, const uint64_t *rdev,
                         int n, const char *remote, const void *notif, size_t notif_len, int has_notif,
                         void **req);
int kvg_nixl_post(kvg_nixl *a, void *req);
int kvg_nixl_status(kvg_nixl *a, void *req);
int kvg_nixl_release(kvg_nixl *a, void *req);

// kvg_nixl_get_notifs drains getNotifs into a malloc'ed buffer:
// u32 agents, then per agent u32 name length, name, u32 messages, then
// per message u32 length, bytes (native byte order).
int kvg_nixl_get_notifs(kvg_nixl *a, void **data, size_t *len);
int kvg_nixl_gen_notif(kvg_nixl *a, const char *remote, const void *msg, size_t len);

// kvg_nixl_status_str writes nixlEnumStrings::statusStr into buf.
void kvg_nixl_status_str(int status, char *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
