/* Simulated NVML (libnvidia-ml.so.1) of one NVIDIA GB10, for the simulated DGX Spark nodes.
 *
 * TEST BED ONLY. Ray and vLLM find GPUs through NVML, so a simulated node needs a library with NVML's C
 * ABI: no Python package provides one, hence these few functions by hand. The simulated NVIDIA container
 * runtime (nvidia-container-runtime-hook) copies this file into a container only when the container asks
 * Docker for the GPU, as the real toolkit mounts the driver's libnvidia-ml.so.1.
 *
 * GB10 facts: name "NVIDIA GB10", compute capability 12.1, unified memory (memory queries are not
 * supported: nvidia-smi prints [N/A]), driver 580.95.05, CUDA 13.0.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

typedef int nvmlReturn_t;
typedef struct { int index; } sim_device;
typedef sim_device *nvmlDevice_t;

enum { OK = 0, UNINITIALIZED = 1, INVALID_ARGUMENT = 2, NOT_SUPPORTED = 3, INSUFFICIENT_SIZE = 7 };

static int initialised;
static sim_device gpu0 = {0};

static nvmlReturn_t copy_str(const char *src, char *dst, unsigned int len) {
    if (dst == NULL) return INVALID_ARGUMENT;
    if (strlen(src) + 1 > len) return INSUFFICIENT_SIZE;
    strcpy(dst, src);
    return OK;
}

nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; initialised = 1; return OK; }
nvmlReturn_t nvmlInit_v2(void) { initialised = 1; return OK; }
nvmlReturn_t nvmlInit(void) { initialised = 1; return OK; }
nvmlReturn_t nvmlShutdown(void) { initialised = 0; return OK; }

const char *nvmlErrorString(nvmlReturn_t r) {
    switch (r) {
    case OK: return "Success";
    case UNINITIALIZED: return "Uninitialized";
    case INVALID_ARGUMENT: return "Invalid Argument";
    case NOT_SUPPORTED: return "Not Supported";
    case INSUFFICIENT_SIZE: return "Insufficient Size";
    default: return "Unknown Error";
    }
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialised) return UNINITIALIZED;
    if (count == NULL) return INVALID_ARGUMENT;
    *count = 1;
    return OK;
}
nvmlReturn_t nvmlDeviceGetCount(unsigned int *count) { return nvmlDeviceGetCount_v2(count); }

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialised) return UNINITIALIZED;
    if (index != 0 || device == NULL) return INVALID_ARGUMENT;
    *device = &gpu0;
    return OK;
}
nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int len) {
    if (!initialised) return UNINITIALIZED;
    if (device != &gpu0) return INVALID_ARGUMENT;
    return copy_str("NVIDIA GB10", name, len);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int len) {
    char host[256] = {0}, buf[96];
    unsigned long h = 5381;
    if (!initialised) return UNINITIALIZED;
    if (device != &gpu0) return INVALID_ARGUMENT;
    gethostname(host, sizeof host - 1);
    for (const char *p = host; *p; p++) h = h * 33 + (unsigned char)*p;
    snprintf(buf, sizeof buf, "GPU-%08lx-%04lx-%04lx-%04lx-%012lx", h & 0xffffffffUL, (h >> 3) & 0xffff,
             (h >> 7) & 0xffff, (h >> 11) & 0xffff, (h * 2654435761UL) & 0xffffffffffffUL);
    return copy_str(buf, uuid, len);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    if (device != &gpu0 || index == NULL) return INVALID_ARGUMENT;
    *index = 0;
    return OK;
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    if (!initialised) return UNINITIALIZED;
    if (device != &gpu0 || major == NULL || minor == NULL) return INVALID_ARGUMENT;
    *major = 12;
    *minor = 1;
    return OK;
}

/* Unified memory: NVML has no framebuffer figure to report on GB10. */
nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, void *memory) {
    (void)device; (void)memory;
    return initialised ? NOT_SUPPORTED : UNINITIALIZED;
}
nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, void *memory) {
    return nvmlDeviceGetMemoryInfo(device, memory);
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int len) {
    if (!initialised) return UNINITIALIZED;
    return copy_str("580.95.05", version, len);
}

nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    if (version == NULL) return INVALID_ARGUMENT;
    *version = 13000;
    return OK;
}
nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *version) { return nvmlSystemGetCudaDriverVersion_v2(version); }
