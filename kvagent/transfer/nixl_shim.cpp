//go:build nixl

// The extern "C" shim between cgo and NIXL's C++ agent (nixl.h). It adds
// no behaviour: each function is one nixlAgent call with its arguments
// converted, exceptions turned into NIXL_ERR_UNKNOWN.
#include "nixl_shim.h"

#include <nixl.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

struct kvg_nixl {
    nixlAgent agent;
    nixlBackendH *backend = nullptr;
    kvg_nixl(const std::string &name, const nixlAgentConfig &cfg) : agent(name, cfg) {}
};

static char *dup_cstr(const std::string &s) {
    char *p = static_cast<char *>(std::malloc(s.size() + 1));
    if (p != nullptr) std::memcpy(p, s.c_str(), s.size() + 1);
    return p;
}

static nixl_opt_args_t backend_args(kvg_nixl *a) {
    nixl_opt_args_t extra;
    extra.backends.push_back(a->backend);
    return extra;
}

extern "C" int kvg_nixl_new(const char *name, const char *backend, const char **keys, const char **vals, int nparams, kvg_nixl **out, char **err) {
    kvg_nixl *a = nullptr;
    try {
        // A progress thread moves transfers and notifications without the
        // caller having to poll.
        nixlAgentConfig cfg(true);
        a = new kvg_nixl(name, cfg);
        nixl_mem_list_t mems;
        nixl_b_params_t params;
        nixl_status_t st = a->agent.getPluginParams(backend, mems, params);
        if (st != NIXL_SUCCESS) {
            *err = dup_cstr(std::string("getPluginParams(") + backend + "): " + nixlEnumStrings::statusStr(st));
            delete a;
            return st;
        }
        for (int i = 0; i < nparams; i++) params[keys[i]] = vals[i];
        st = a->agent.createBackend(backend, params, a->backend);
        if (st != NIXL_SUCCESS) {
            *err = dup_cstr(std::string("createBackend(") + backend + "): " + nixlEnumStrings::statusStr(st));
            delete a;
            return st;
        }
        *out = a;
        return NIXL_SUCCESS;
    } catch (const std::exception &e) {
        *err = dup_cstr(e.what());
        delete a;
        return NIXL_ERR_UNKNOWN;
    }
}

extern "C" void kvg_nixl_free(kvg_nixl *a) { delete a; }

extern "C" int kvg_nixl_register(kvg_nixl *a, int mem, uintptr_t addr, size_t len, uint64_t dev, int dereg) {
    try {
        nixl_reg_dlist_t dl(static_cast<nixl_mem_t>(mem));
        dl.addDesc(nixlBlobDesc(addr, len, dev, nixl_blob_t()));
        nixl_opt_args_t extra = backend_args(a);
        return dereg ? a->agent.deregisterMem(dl, &extra) : a->agent.registerMem(dl, &extra);
    } catch (const std::exception &) {
        return NIXL_ERR_UNKNOWN;
    }
}

extern "C" int kvg_nixl_local_md(kvg_nixl *a, void **data, size_t *len) {
    try {
        nixl_blob_t md;
        nixl_status_t st = a->agent.getLocalMD(md);
        if (st != NIXL_SUCCESS) return st;
        *data = std::malloc(md.size() > 0 ? md.size() : 1);
        std::memcpy(*data, md.data(), md.size());
        *len = md.size();
        return NIXL_SUCCESS;
    } catch (const std::exception &) {
        return NIXL_ERR_UNKNOWN;
    }
}

extern "C" int kvg_nixl_load_md(kvg_nixl *a, const void *data, size_t len, char **name) {
    try {
        std::string remote;
        nixl_status_t st = a->agent.loadRemoteMD(nixl_blob_t(static_cast<const char *>(data), len), remote);
        if (st == NIXL_SUCCESS) *name = dup_cstr(remote);
        return st;
    } catch (const std::exception &) {
        return NIXL_ERR_UNKNOWN;
    }
}

extern "C" int kvg_nixl_invalidate(kvg_nixl *a, const char *remote) {
    try {
        return a->agent.invalidateRemoteMD(remote);
    } catch (const std::exception &) {
        return NIXL_ERR_UNKNOWN;
    }
}

extern "C" int kvg_nixl_create_xfer(kvg_nixl *a, int op,
                                    int lmem, const uintptr_t *laddr, const size_t *llen, const uint64_t *ldev,
                                    int rmem, const uintptr_t *raddr, const size_t *rlen, const uint64_t *rdev,
                                    int n, const char *remote, const void *notif, size_t notif_len, int has_notif,
                                    void **req) {
    try {
        nixl_xfer_dlist_t local(static_cast<nixl_mem_t>(lmem));
        nixl_xfer_dlist_t remote_descs(static_cast<nixl_mem_t>(rmem));
        for (int i = 0; i < n; i++) {
            local.addDesc(nixlBasicDesc(laddr[i], llen[i], ldev[i]));
            remote_descs.addDesc(nixlBasicDesc(raddr[i], rlen[i], rdev[i]));
        }
        nixl_opt_args_t extra = backend_args(a);
        if (has_notif) {
            extra.notifMsg = nixl_blob_t(static_cast<const char *>(notif), notif_len);
            extra.hasNotif = true;
        }
        nixlXferReqH *h = nullptr;
        nixl_status_t st = a->agent.createXferReq(static_cast<nixl_xfer_op_t>(op), local, remote_descs, remote, h, &extra);
        if (st == NIXL_SUCCESS) *req = h;
        return st;
    } catch (const std::exception &) {
        return NIXL_ERR_UNKNOWN;
    }
}

extern "C" int kvg_nixl_post(kvg_nixl *a, void *req) {
    try {
        return a->agent.postXferReq(static_cast<nixlXferReqH *>(req));
    } catch (const std::exception &) {
        return NIXL_ERR_UNKNOWN;
    }
}

extern "C" int kvg_nixl_status(kvg_nixl *a, void *req) {
    try {
        return a->agent.getXferStatus(static_cast<nixlXferReqH *>(req));
    } catch (const std::exception &) {
        return NIXL_ERR_UNKNOWN;
    }
}

extern "C" int kvg_nixl_release(kvg_nixl *a, void *req) {
    try {
        return a->agent.releaseXferReq(static_cast<nixlXferReqH *>(req));
    } catch (const std::exception &) {
        return NIXL_ERR_UNKNOWN;
    }
}

static void put_u32(std::string &b, uint32_t v) { b.append(reinterpret_cast<const char *>(&v), sizeof v); }

extern "C" int kvg_nixl_get_notifs(kvg_nixl *a, void **data, size_t *len) {
    try {
        nixl_notifs_t notifs;
        nixl_status_t st = a->agent.getNotifs(notifs);
        if (st != NIXL_SUCCESS) return st;
        std::string b;
        put_u32(b, static_cast<uint32_t>(notifs.size()));
        for (const auto &kv : notifs) {
            put_u32(b, static_cast<uint32_t>(kv.first.size()));
            b += kv.first;
            put_u32(b, static_cast<uint32_t>(kv.second.size()));
            for (const auto &m : kv.second) {
                put_u32(b, static_cast<uint32_t>(m.size()));
                b += m;
            }
        }
        *data = std::malloc(b.size());
        std::memcpy(*data, b.data(), b.size());
        *len = b.size();
        return NIXL_SUCCESS;
    } catch (const std::exception &) {
        return NIXL_ERR_UNKNOWN;
    }
}

extern "C" int kvg_nixl_gen_notif(kvg_nixl *a, const char *remote, const void *msg, size_t len) {
    try {
        nixl_opt_args_t extra = backend_args(a);
        return a->agent.genNotif(remote, nixl_blob_t(static_cast<const char *>(msg), len), &extra);
    } catch (const std::exception &) {
        return NIXL_ERR_UNKNOWN;
    }
}

extern "C" void kvg_nixl_status_str(int status, char *buf, size_t len) {
    std::string s = nixlEnumStrings::statusStr(static_cast<nixl_status_t>(status));
    std::strncpy(buf, s.c_str(), len - 1);
    buf[len - 1] = 0;
}
