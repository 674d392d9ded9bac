/* Generated from taskenv/taskenv.go by go generate ./taskenv: do not edit. The names a task's
 * environment carries that the preload library reads. */
#ifndef GPUFRAC_TASKENV_H
#define GPUFRAC_TASKENV_H

#define GF_ENV_RESERVATION "GPUFRAC_RESERVATION"
#define GF_ENV_RESERVATION_PREFIX "GPUFRAC_RESERVATION_"
#define GF_ENV_GPU_UUID "GPUFRAC_GPU_UUID"
#define GF_ENV_FENCE_DIR "GPUFRAC_FENCE_DIR"
#define GF_ENV_FENCE_DEBUG "GPUFRAC_FENCE_DEBUG"

#endif
