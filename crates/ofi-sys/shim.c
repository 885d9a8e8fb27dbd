/* libfabric's data-path and object calls are static inline functions in its headers: each
 * jumps through the object's table of operations. These wrappers give them symbols. They
 * reach no libfabric symbol themselves, so nothing here links against the library, which
 * ofi-sys opens at run time. */
#include "wrapper.h"

int ws_fi_domain(struct fid_fabric *f, struct fi_info *i, struct fid_domain **d, void *c) { return fi_domain(f, i, d, c); }
int ws_fi_endpoint(struct fid_domain *d, struct fi_info *i, struct fid_ep **ep, void *c) { return fi_endpoint(d, i, ep, c); }
int ws_fi_cq_open(struct fid_domain *d, struct fi_cq_attr *a, struct fid_cq **cq, void *c) { return fi_cq_open(d, a, cq, c); }
int ws_fi_av_open(struct fid_domain *d, struct fi_av_attr *a, struct fid_av **av, void *c) { return fi_av_open(d, a, av, c); }
int ws_fi_ep_bind(struct fid_ep *ep, struct fid *b, uint64_t flags) { return fi_ep_bind(ep, b, flags); }
int ws_fi_enable(struct fid_ep *ep) { return fi_enable(ep); }
int ws_fi_close(struct fid *f) { return fi_close(f); }
int ws_fi_getname(struct fid *f, void *addr, size_t *len) { return fi_getname(f, addr, len); }
int ws_fi_av_insert(struct fid_av *av, const void *addr, size_t n, fi_addr_t *out, uint64_t flags, void *c) {
    return fi_av_insert(av, addr, n, out, flags, c);
}
int ws_fi_mr_reg(struct fid_domain *d, const void *buf, size_t len, uint64_t access, uint64_t offset,
                 uint64_t key, uint64_t flags, struct fid_mr **mr, void *c) {
    return fi_mr_reg(d, buf, len, access, offset, key, flags, mr, c);
}
int ws_fi_mr_bind(struct fid_mr *mr, struct fid *b, uint64_t flags) { return fi_mr_bind(mr, b, flags); }
int ws_fi_mr_enable(struct fid_mr *mr) { return fi_mr_enable(mr); }
void *ws_fi_mr_desc(struct fid_mr *mr) { return fi_mr_desc(mr); }
uint64_t ws_fi_mr_key(struct fid_mr *mr) { return fi_mr_key(mr); }
ssize_t ws_fi_sendv(struct fid_ep *ep, const struct iovec *iov, void **desc, size_t n, fi_addr_t dest, void *c) {
    return fi_sendv(ep, iov, desc, n, dest, c);
}
ssize_t ws_fi_inject(struct fid_ep *ep, const void *buf, size_t len, fi_addr_t dest) { return fi_inject(ep, buf, len, dest); }
ssize_t ws_fi_recv(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, void *c) {
    return fi_recv(ep, buf, len, desc, src, c);
}
ssize_t ws_fi_read(struct fid_ep *ep, void *buf, size_t len, void *desc, fi_addr_t src, uint64_t addr, uint64_t key, void *c) {
    return fi_read(ep, buf, len, desc, src, addr, key, c);
}
ssize_t ws_fi_write(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest, uint64_t addr, uint64_t key, void *c) {
    return fi_write(ep, buf, len, desc, dest, addr, key, c);
}
ssize_t ws_fi_cq_read(struct fid_cq *cq, void *buf, size_t count) { return fi_cq_read(cq, buf, count); }
ssize_t ws_fi_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags) { return fi_cq_readerr(cq, buf, flags); }
const char *ws_fi_cq_strerror(struct fid_cq *cq, int err, const void *data, char *buf, size_t len) {
    return fi_cq_strerror(cq, err, data, buf, len);
}
int ws_fi_control(struct fid *f, int command, void *arg) { return fi_control(f, command, arg); }
int ws_fi_trywait(struct fid_fabric *f, struct fid **fids, int n) { return fi_trywait(f, fids, n); }
ssize_t ws_fi_cancel(struct fid *f, void *c) { return fi_cancel(f, c); }
/* A write that completes only once the bytes are in the peer's memory, so that a message
 * sent after it finds them there. */
ssize_t ws_fi_write_delivered(struct fid_ep *ep, const void *buf, size_t len, void *desc, fi_addr_t dest,
                              uint64_t addr, uint64_t key, void *c) {
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    struct fi_rma_iov rma = { .addr = addr, .len = len, .key = key };
    struct fi_msg_rma msg = { .msg_iov = &iov, .desc = &desc, .iov_count = 1, .addr = dest,
                              .rma_iov = &rma, .rma_iov_count = 1, .context = c, .data = 0 };
    return fi_writemsg(ep, &msg, FI_DELIVERY_COMPLETE | FI_COMPLETION);
}
