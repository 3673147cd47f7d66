/* rpc_proto.h: the messages of prog_rpc.c, shared with the tests that talk to it. */
#ifndef RPC_PROTO_H
#define RPC_PROTO_H
#include <stddef.h>
#include <stdint.h>

enum { OP_ECHO = 1, OP_GETTID, OP_BLOCK, OP_CRASH, OP_QUIT, OP_SPIN, OP_SPINPID, OP_VEC };

struct req {
    uint32_t op, seq;
    uint64_t sum;     /* of data[] */
    uint8_t data[48];
};
struct rep {
    uint32_t op, seq;
    uint64_t sum;
    int64_t a, b;     /* probe results */
};

static inline uint64_t checksum(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

#endif
