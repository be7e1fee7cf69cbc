/* A CUDA program without the CUDA toolkit: the driver API through dlopen("libcuda.so.1").
 * Prints the devices it sees, then on device 0 allocates memory, JIT-compiles a PTX kernel,
 * launches it over 1M elements, copies the result back and checks every element.
 * Built on Debian 12: gcc -O2 -o cudaprobe cudaprobe.c -ldl (scripts/device/cdi-podman.sh). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
typedef unsigned long long CUdeviceptr;

static const char PTX[] =
    ".version 7.0\n.target sm_50\n.address_size 64\n"
    ".visible .entry fill(.param .u64 out, .param .u32 n)\n{\n"
    "  .reg .pred %p;\n  .reg .b32 %r<8>;\n  .reg .b64 %rd<5>;\n"
    "  ld.param.u64 %rd1, [out];\n  ld.param.u32 %r1, [n];\n"
    "  mov.u32 %r2, %ctaid.x;\n  mov.u32 %r3, %ntid.x;\n  mov.u32 %r4, %tid.x;\n"
    "  mad.lo.s32 %r5, %r2, %r3, %r4;\n  setp.ge.u32 %p, %r5, %r1;\n  @%p bra DONE;\n"
    "  cvta.to.global.u64 %rd2, %rd1;\n  mul.wide.u32 %rd3, %r5, 4;\n  add.s64 %rd4, %rd2, %rd3;\n"
    "  mad.lo.s32 %r6, %r5, 3, 1;\n  st.global.u32 [%rd4], %r6;\n"
    "DONE:\n  ret;\n}\n";

#define LOAD(name, sym) name = dlsym(lib, sym); if (!name) { fprintf(stderr, "missing %s\n", sym); return 2; }
#define CHECK(call) do { CUresult r_ = (call); if (r_ != 0) { const char *s_ = "?"; \
    if (cuGetErrorString) cuGetErrorString(r_, &s_); \
    fprintf(stderr, "%s failed: %d (%s)\n", #call, r_, s_); return 1; } } while (0)

int main(void) {
    void *lib = dlopen("libcuda.so.1", RTLD_NOW);
    if (!lib) { fprintf(stderr, "dlopen libcuda.so.1: %s\n", dlerror()); return 2; }
    CUresult (*cuInit)(unsigned), (*cuDriverGetVersion)(int *), (*cuDeviceGetCount)(int *),
        (*cuDeviceGet)(CUdevice *, int), (*cuDeviceGetName)(char *, int, CUdevice),
        (*cuDeviceGetUuid)(unsigned char *, CUdevice), (*cuDeviceTotalMem)(size_t *, CUdevice),
        (*cuCtxCreate)(CUcontext *, unsigned, CUdevice), (*cuMemAlloc)(CUdeviceptr *, size_t),
        (*cuModuleLoadData)(CUmodule *, const void *),
        (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *),
        (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                          unsigned, CUstream, void **, void **),
        (*cuCtxSynchronize)(void), (*cuMemcpyDtoH)(void *, CUdeviceptr, size_t),
        (*cuMemFree)(CUdeviceptr), (*cuCtxDestroy)(CUcontext);
    CUresult (*cuGetErrorString)(CUresult, const char **) = dlsym(lib, "cuGetErrorString");
    LOAD(cuInit, "cuInit"); LOAD(cuDriverGetVersion, "cuDriverGetVersion");
    LOAD(cuDeviceGetCount, "cuDeviceGetCount"); LOAD(cuDeviceGet, "cuDeviceGet");
    LOAD(cuDeviceGetName, "cuDeviceGetName"); LOAD(cuDeviceGetUuid, "cuDeviceGetUuid");
    LOAD(cuDeviceTotalMem, "cuDeviceTotalMem_v2"); LOAD(cuCtxCreate, "cuCtxCreate_v2");
    LOAD(cuMemAlloc, "cuMemAlloc_v2"); LOAD(cuModuleLoadData, "cuModuleLoadData");
    LOAD(cuModuleGetFunction, "cuModuleGetFunction"); LOAD(cuLaunchKernel, "cuLaunchKernel");
    LOAD(cuCtxSynchronize, "cuCtxSynchronize"); LOAD(cuMemcpyDtoH, "cuMemcpyDtoH_v2");
    LOAD(cuMemFree, "cuMemFree_v2"); LOAD(cuCtxDestroy, "cuCtxDestroy_v2");

    CHECK(cuInit(0));
    int version = 0, count = 0;
    CHECK(cuDriverGetVersion(&version));
    CHECK(cuDeviceGetCount(&count));
    printf("CUDA driver API %d.%d, %d device(s)\n", version / 1000, version % 1000 / 10, count);
    for (int i = 0; i < count; i++) {
        CUdevice d; char name[256]; unsigned char u[16]; size_t mem = 0;
        CHECK(cuDeviceGet(&d, i));
        CHECK(cuDeviceGetName(name, sizeof name, d));
        CHECK(cuDeviceGetUuid(u, d));
        CHECK(cuDeviceTotalMem(&mem, d));
        printf("device %d: %s, %zu MiB, GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x\n",
               i, name, mem >> 20, u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9],
               u[10], u[11], u[12], u[13], u[14], u[15]);
    }
    if (count == 0) return 1;

    const unsigned n = 1u << 20;
    CUdevice dev; CUcontext ctx; CUmodule mod; CUfunction fn; CUdeviceptr buf;
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuCtxCreate(&ctx, 0, dev));
    CHECK(cuMemAlloc(&buf, n * sizeof(unsigned)));
    CHECK(cuModuleLoadData(&mod, PTX));
    CHECK(cuModuleGetFunction(&fn, mod, "fill"));
    unsigned nn = n;
    void *args[] = {&buf, &nn};
    CHECK(cuLaunchKernel(fn, n / 256, 1, 1, 256, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
    unsigned *host = malloc(n * sizeof(unsigned));
    if (!host) return 1;
    CHECK(cuMemcpyDtoH(host, buf, n * sizeof(unsigned)));
    unsigned bad = 0;
    for (unsigned i = 0; i < n; i++) bad += host[i] != i * 3 + 1;
    CHECK(cuMemFree(buf));
    CHECK(cuCtxDestroy(ctx));
    printf("kernel fill<<<%u, 256>>> on device 0: %u of %u elements wrong\n", n / 256, bad, n);
    return bad == 0 ? 0 : 1;
}
