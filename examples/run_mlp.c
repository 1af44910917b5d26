/* Calls a saved MLP (an artifact of three float32 arguments) from C through aotkit_runtime.h.
 *
 *   cc $(python -m aotkit.native flags) examples/run_mlp.c -o run_mlp
 *   ./run_mlp mlp.aotx VALUE ...   (every input's values, flat, in the artifact's order)
 *
 * Prints the artifact's signature, then the first output's values.
 */
#include <stdio.h>
#include <stdlib.h>

#include "aotkit_runtime.h"

int main(int argc, char **argv) {
  char err[AOTKIT_ERROR_SIZE];
  aotkit_artifact *model = NULL;
  aotkit_runtime *runtime = NULL;
  aotkit_program *program = NULL;
  int status = 1;
  if (argc < 2) {
    fprintf(stderr, "usage: run_mlp MODEL.aotx VALUE ...\n");
    return 2;
  }
  if (aotkit_artifact_open(argv[1], &model, err, sizeof err) ||
      aotkit_runtime_open(NULL, "cpu", &runtime, err, sizeof err) ||
      aotkit_program_load(runtime, model, &program, err, sizeof err)) {
    fprintf(stderr, "run_mlp: %s\n", err);
    goto done;
  }
  printf("%s\n", aotkit_artifact_signature(model));
  size_t nin = aotkit_artifact_num_inputs(model), next = 2;
  float *inputs[16] = {0};
  if (nin > 16 || aotkit_artifact_num_outputs(model) != 1) {
    fprintf(stderr, "run_mlp: expected at most 16 inputs and one output\n");
    goto done;
  }
  for (size_t i = 0; i < nin; i++) {
    const aotkit_leaf *leaf = aotkit_artifact_input(model, i);
    size_t count = leaf->nbytes / sizeof(float);
    inputs[i] = malloc(leaf->nbytes + 1);
    for (size_t k = 0; k < count; k++)
      inputs[i][k] = next < (size_t)argc ? strtof(argv[next++], NULL) : 0.0f;
  }
  const aotkit_leaf *out = aotkit_artifact_output(model, 0);
  float *result = malloc(out->nbytes + 1);
  void *outputs[1] = {result};
  if (aotkit_program_call(program, (const void *const *)inputs, nin, outputs, 1, err,
                          sizeof err) == 0) {
    for (size_t k = 0; k < out->nbytes / sizeof(float); k++) printf("%.9g\n", result[k]);
    status = 0;
  } else {
    fprintf(stderr, "run_mlp: %s\n", err);
  }
  free(result);
  for (size_t i = 0; i < nin; i++) free(inputs[i]);
done:
  aotkit_program_free(&program);
  aotkit_runtime_close(&runtime);
  aotkit_artifact_close(&model);
  return status;
}
