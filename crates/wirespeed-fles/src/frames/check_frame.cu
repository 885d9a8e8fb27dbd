// Checks every microslice of a frame where it lies in GPU memory: `per_part` blocks per
// component, their threads taking the component's microslices in turn. Each reads the microslice's
// descriptor (FLESnet's 32 bytes), finds its content as the component layout says, and
// compares the content's CRC-32C with the descriptor's. Counts go to the table's header.

struct Part {
    unsigned long long offset, len, microslices, input;
};
struct Outcome {
    unsigned int bad, bad_part, bad_microslice, checked;
};

__device__ unsigned int crc32c(const unsigned int (*t)[256], const unsigned char *p, unsigned int n) {
    unsigned int crc = 0xFFFFFFFFu;
    while (n > 0 && ((unsigned long long)p & 3) != 0) {
        crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFF];
        n--;
    }
    // Slicing by four: one aligned word a step.
    for (; n >= 4; n -= 4, p += 4) {
        unsigned int w = crc ^ *(const unsigned int *)p;
        crc = t[3][w & 0xFF] ^ t[2][(w >> 8) & 0xFF] ^ t[1][(w >> 16) & 0xFF] ^ t[0][w >> 24];
    }
    while (n-- > 0) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFF];
    return ~crc;
}

extern "C" __global__ void check_frame(const unsigned char *frame, unsigned char *table, unsigned int parts,
                                       unsigned int per_part) {
    __shared__ unsigned int t[4][256];
    for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x) {
        unsigned int c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        t[0][i] = c;
    }
    __syncthreads();
    for (int k = 1; k < 4; k++) {
        for (unsigned int i = threadIdx.x; i < 256; i += blockDim.x) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
        __syncthreads();
    }
    const unsigned int p = blockIdx.x / per_part, sub = blockIdx.x % per_part;
    if (p >= parts) return;
    Outcome *out = (Outcome *)table;
    const Part part = ((const Part *)(table + sizeof(Outcome)))[p];
    const unsigned char *c = frame + part.offset;
    unsigned long long n = part.microslices;
    if (n == 0) return;
    if (n * 32 > part.len) {
        if (threadIdx.x == 0 && sub == 0 && atomicAdd(&out->bad, 1) == 0) {
            out->bad_part = p;
            out->bad_microslice = 0;
        }
        return;
    }
    unsigned long long first = *(const unsigned long long *)(c + 24);
    for (unsigned long long m = sub * blockDim.x + threadIdx.x; m < n; m += (unsigned long long)per_part * blockDim.x) {
        const unsigned char *d = c + m * 32;
        unsigned short flags = *(const unsigned short *)(d + 4);
        unsigned int crc = *(const unsigned int *)(d + 16);
        unsigned int size = *(const unsigned int *)(d + 20);
        unsigned long long offset = *(const unsigned long long *)(d + 24);
        unsigned long long start = n * 32 + (offset - first);
        bool good = d[0] == 0xDD && d[1] == 0x01 && offset >= first && start <= part.len && size <= part.len - start;
        if (good && (flags & 1)) good = crc32c(t, c + start, size) == crc;
        atomicAdd(&out->checked, 1);
        if (!good && atomicAdd(&out->bad, 1) == 0) {
            out->bad_part = p;
            out->bad_microslice = (unsigned int)m;
        }
    }
}
