/* aotkit_runtime.h: run aotkit artifacts (.aotx) from C, through a PJRT C API plugin.
 *
 * No Python at run time. An artifact is opened and checked as aotkit.load checks it
 * (magic, format version, sizes, the header's and every section's SHA-256, the header's
 * fields), its signature read (flat inputs and outputs, each with its dtype, shape and path
 * name as the `aotkit` CLI names it: `x`, `params['w']`, `out[0]`), and it is run on a PJRT
 * plugin (xla-cpu-pjrt's CPU plugin, libtpu, ...) with host buffers: the program is the
 * artifact's portable StableHLO, compiled through the plugin (at a StableHLO version the
 * plugin reads), or its serialized executable where the plugin's platform and version are
 * the ones it was compiled for. docs/deploy.md describes the rules.
 *
 * Every function that can fail returns 0 on success, or AOTKIT_USER_ERROR /
 * AOTKIT_RUNTIME_ERROR with a message in `err` (reading `<where>: <what>; <what to do>`)
 * when `err` is not NULL. Handles are not thread-safe: use one from one thread at a time.
 * The close functions take the address of the handle and set it to NULL, so closing twice
 * (or closing NULL) does nothing. A handle of another kind is refused, not misread.
 */
#ifndef AOTKIT_RUNTIME_H_
#define AOTKIT_RUNTIME_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AOTKIT_OK 0
#define AOTKIT_USER_ERROR 1    /* a bad file, argument or input */
#define AOTKIT_RUNTIME_ERROR 3 /* the plugin failed (compile, execute, transfer) */

/* The size of an error buffer that holds any message in full. */
#define AOTKIT_ERROR_SIZE 2048

typedef struct aotkit_artifact aotkit_artifact;
typedef struct aotkit_runtime aotkit_runtime;
typedef struct aotkit_program aotkit_program;

/* One flat input or output of an artifact. */
typedef struct aotkit_leaf {
  const char *name;  /* its path, as the CLI names it: x, params['w'], args[0], out[1] */
  const char *dtype; /* aotkit's name: f32, bf16, i8, bool, ... */
  size_t itemsize;   /* bytes per element (NumPy's storage; 1 for bool) */
  int rank;
  const int64_t *dims; /* `rank` sizes; -1 for a symbolic dimension */
  size_t nbytes;       /* itemsize * the product of dims (0 if any is symbolic) */
  int donated;         /* inputs: whether its buffer is donated to the program */
} aotkit_leaf;

/* --- artifacts -------------------------------------------------------------------------- */

/* Opens and checks the artifact at `path`. */
int aotkit_artifact_open(const char *path, aotkit_artifact **out, char *err, size_t errlen);
/* The same for bytes in memory (copied); `label` names them in messages. */
int aotkit_artifact_open_bytes(const void *data, size_t size, const char *label,
                               aotkit_artifact **out, char *err, size_t errlen);
void aotkit_artifact_close(aotkit_artifact **artifact);

const char *aotkit_artifact_name(const aotkit_artifact *artifact);
size_t aotkit_artifact_num_inputs(const aotkit_artifact *artifact);
size_t aotkit_artifact_num_outputs(const aotkit_artifact *artifact);
/* NULL for an index out of range. */
const aotkit_leaf *aotkit_artifact_input(const aotkit_artifact *artifact, size_t i);
const aotkit_leaf *aotkit_artifact_output(const aotkit_artifact *artifact, size_t i);
/* `f(x: f32[2,4], w: f32[4,3]) -> (out: f32[2,3])`; "" for a NULL handle. */
const char *aotkit_artifact_signature(const aotkit_artifact *artifact);
/* A header string field ("stablehlo", "jaxlib", "aotkit") or a target field
 * ("target.platform"); NULL if absent. */
const char *aotkit_artifact_field(const aotkit_artifact *artifact, const char *key);

/* A symbolic program's held specializations ("b=2, t=8"): the shapes it runs. Selecting
 * one makes the leaves' dims and nbytes that specialization's; aotkit_program_load then
 * compiles its static module (a `stablehlo@VERSION/SECTION` section that
 * `python -m aotkit.native portable FILE` adds). NULL for an index out of range. */
size_t aotkit_artifact_num_specializations(const aotkit_artifact *artifact);
const char *aotkit_artifact_specialization(const aotkit_artifact *artifact, size_t i);
int aotkit_artifact_select(aotkit_artifact *artifact, size_t i, char *err, size_t errlen);

/* 0 where aotkit_program_load can run the artifact; else why not (a sharded program, or a
 * symbolic one with no specialization selected or no static module of it). */
int aotkit_artifact_runnable(const aotkit_artifact *artifact, char *err, size_t errlen);

/* --- plugins ---------------------------------------------------------------------------- */

/* Loads a PJRT plugin and creates its client. `plugin` is a shared library path, or NULL to
 * search for the plugin of `platform` ("cpu", "tpu", "cuda"; NULL means "cpu") as
 * docs/deploy.md lists. */
int aotkit_runtime_open(const char *plugin, const char *platform, aotkit_runtime **out,
                        char *err, size_t errlen);
void aotkit_runtime_close(aotkit_runtime **runtime);
const char *aotkit_runtime_platform(const aotkit_runtime *runtime);
const char *aotkit_runtime_plugin_path(const aotkit_runtime *runtime);
/* The StableHLO versions the plugin reads ("0.9.0 to 1.13.3"), or "" if it does not say. */
const char *aotkit_runtime_stablehlo_window(const aotkit_runtime *runtime);

/* --- programs --------------------------------------------------------------------------- */

/* Prepares `artifact` to run on `runtime`: loads its executable where the plugin's platform
 * and version match its target, else compiles its portable StableHLO. The artifact must
 * outlive the program. Sharded artifacts are refused, and symbolic ones unless a held
 * specialization with a static module is selected (aotkit_artifact_select). */
int aotkit_program_load(aotkit_runtime *runtime, const aotkit_artifact *artifact,
                        aotkit_program **out, char *err, size_t errlen);
void aotkit_program_free(aotkit_program **program);
/* What aotkit_program_load did and why, one line or more (what `aotkit-run -v` prints). */
const char *aotkit_program_how(const aotkit_program *program);

/* Runs the program: `inputs[i]` holds input i's `nbytes` (row-major, its dtype's host
 * storage), `outputs[j]` has room for output j's `nbytes`. */
int aotkit_program_call(aotkit_program *program, const void *const *inputs, size_t num_inputs,
                        void *const *outputs, size_t num_outputs, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif

#endif /* AOTKIT_RUNTIME_H_ */
