/* aotkit-run: runs an aotkit artifact on a PJRT plugin, without Python.
 *
 *   aotkit-run model.aotx [--plugin PATH | --platform cpu|tpu|cuda] [--input x.npy ...]
 *              [--inputs in.npz] [--output out.npz | -o DIR] [--repeat N] [-v]
 *
 * Inputs are .npy files, one per flat input in order, or one .npz archive keyed by leaf path
 * (`x`, `params['w']`, `args[0]`), written uncompressed (np.savez, not np.savez_compressed).
 * Outputs go to an .npz archive keyed by leaf path (`out`, `out[0]`, `out['loss']`) or to
 * one .npy file per output in a folder. Exit status: 0 done, 1 a bad file, input or plugin
 * failure, 2 a bad command line. Messages read `aotkit-run: <where>: <what>; <what to do>`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "aotkit_runtime.h"

#define USAGE                                                                                  \
  "usage: aotkit-run MODEL.aotx [--plugin PATH | --platform cpu|tpu|cuda] [--input X.npy ...]\n" \
  "                  [--inputs IN.npz] [--output OUT.npz | -o DIR] [--repeat N] [-v]\n"

static int usage(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs(USAGE, stderr);
  fputs("aotkit-run: error: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 2;
}

static int error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("aotkit-run: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* --- files ------------------------------------------------------------------------------- */

static int read_file(const char *path, const char *what, unsigned char **out, size_t *size) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return error("%s: %s: %s; check the path", what, path, strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return error("%s: %s is not a regular file; give a file", what, path);
  }
  size_t n = (size_t)st.st_size;
  unsigned char *data = malloc(n ? n : 1);
  if (data == NULL) {
    fclose(f);
    return error("%s: %s: cannot allocate %zu bytes; free memory", what, path, n);
  }
  size_t got = n ? fread(data, 1, n, f) : 0;
  fclose(f);
  if (got != n) {
    free(data);
    return error("%s: %s: read %zu of %zu bytes; check the file", what, path, got, n);
  }
  *out = data;
  *size = n;
  return 0;
}

static int write_file(const char *path, const char *what, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  if (f == NULL) return error("%s: cannot write %s: %s; check the folder", what, path, strerror(errno));
  size_t put = n ? fwrite(data, 1, n, f) : 0;
  int closed = fclose(f);
  if (put != n || closed != 0)
    return error("%s: cannot write %s: %s; check the disk", what, path, strerror(errno));
  return 0;
}

/* --- .npy (NumPy's format, versions 1 to 3) ------------------------------------------------ */

typedef struct {
  char descr[16];
  int rank;
  int64_t dims[64];
  const unsigned char *data;
  size_t nbytes;
} npy;

/* The .npy descr of a leaf's dtype: NumPy's for its own types, `V<size>` for ml_dtypes'
 * (bfloat16, float8, int4 are saved as void of their size). */
static void descr_of(const aotkit_leaf *l, char *out, size_t n) {
  static const struct {
    const char *dtype, *descr;
  } table[] = {{"bool", "|b1"}, {"i8", "|i1"},  {"i16", "<i2"}, {"i32", "<i4"}, {"i64", "<i8"},
               {"u8", "|u1"},   {"u16", "<u2"}, {"u32", "<u4"}, {"u64", "<u8"}, {"f16", "<f2"},
               {"f32", "<f4"},  {"f64", "<f8"}, {"c64", "<c8"}, {"c128", "<c16"}};
  for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
    if (!strcmp(table[i].dtype, l->dtype)) {
      snprintf(out, n, "%s", table[i].descr);
      return;
    }
  snprintf(out, n, "%sV%zu", l->itemsize == 1 ? "|" : "<", l->itemsize);
}

static bool descr_matches(const char *have, const char *want) {
  /* byte order marks that mean the same on a little-endian host */
  char a = have[0], b = want[0];
  bool na = a == '<' || a == '|' || a == '=', nb = b == '<' || b == '|' || b == '=';
  return na && nb && !strcmp(have + 1, want + 1);
}

/* Parses .npy bytes; NULL on success, else what is wrong. */
static const char *parse_npy(const unsigned char *d, size_t n, npy *out) {
  if (n < 10 || memcmp(d, "\x93NUMPY", 6) != 0) return "is not a .npy file (no \\x93NUMPY magic)";
  unsigned major = d[6];
  size_t hlen, start;
  if (major == 1) {
    hlen = (size_t)d[8] | (size_t)d[9] << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (n < 12) return "is truncated";
    hlen = (size_t)d[8] | (size_t)d[9] << 8 | (size_t)d[10] << 16 | (size_t)d[11] << 24;
    start = 12;
  } else {
    return "has a .npy format version this runner does not read (1 to 3)";
  }
  if (hlen > n - start) return "is truncated (its header runs past the end)";
  char *h = strndup((const char *)d + start, hlen);
  const char *e = NULL;
  char *p = strstr(h, "'descr':");
  char *fo = strstr(h, "'fortran_order':");
  char *sh = strstr(h, "'shape':");
  if (p == NULL || fo == NULL || sh == NULL) {
    e = "has a header without descr, fortran_order and shape";
    goto done;
  }
  p += 8;
  while (*p == ' ') p++;
  if (*p != '\'' || strchr(p + 1, '\'') == NULL || strchr(p + 1, '\'') - p - 1 >= 15) {
    e = "has a structured or unreadable descr (give a plain array)";
    goto done;
  }
  size_t dl = (size_t)(strchr(p + 1, '\'') - p - 1);
  memcpy(out->descr, p + 1, dl);
  out->descr[dl] = 0;
  fo += 16;
  while (*fo == ' ') fo++;
  if (strncmp(fo, "False", 5) != 0) {
    e = "is in Fortran order; save it C-contiguous (np.ascontiguousarray)";
    goto done;
  }
  sh += 8;
  while (*sh == ' ') sh++;
  if (*sh != '(') {
    e = "has an unreadable shape";
    goto done;
  }
  sh++;
  out->rank = 0;
  while (1) {
    while (*sh == ' ' || *sh == ',') sh++;
    if (*sh == ')') break;
    char *end;
    errno = 0;
    long long v = strtoll(sh, &end, 10);
    if (end == sh || v < 0 || errno || out->rank == 64) {
      e = "has an unreadable shape";
      goto done;
    }
    out->dims[out->rank++] = v;
    sh = end;
  }
  out->data = d + start + hlen;
  out->nbytes = n - start - hlen;
done:
  free(h);
  return e;
}

static size_t npy_header(char *buf, const aotkit_leaf *l, const int64_t *dims) {
  char descr[16], shape[1024] = "";
  descr_of(l, descr, sizeof descr);
  size_t k = 0;
  for (int i = 0; i < l->rank; i++)
    k += (size_t)snprintf(shape + k, sizeof shape - k, "%lld,%s", (long long)dims[i],
                          i + 1 < l->rank ? " " : "");
  if (l->rank > 1) shape[k - 1] = 0; /* NumPy writes (2, 3) and (2,) */
  char dict[1200];
  int m = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                   descr, shape);
  size_t total = 10 + (size_t)m + 1;
  size_t padded = (total + 63) / 64 * 64;
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  size_t hlen = padded - 10;
  buf[8] = (char)(hlen & 0xff);
  buf[9] = (char)(hlen >> 8);
  memcpy(buf + 10, dict, (size_t)m);
  memset(buf + 10 + m, ' ', padded - 10 - (size_t)m - 1);
  buf[padded - 1] = '\n';
  return padded;
}

/* --- .npz: a zip of stored .npy entries ---------------------------------------------------- */

static uint32_t crc_table[256];
static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}
static uint32_t crc32(uint32_t crc, const unsigned char *p, size_t n) {
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

static uint16_t rd16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t rd32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const unsigned char *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

typedef struct {
  char *key; /* the entry's name without ".npy" */
  const unsigned char *data;
  size_t size;
} npz_entry;

/* Lists the entries of an .npz; NULL on success, else what is wrong (in `why`). */
static const char *read_npz(const unsigned char *d, size_t n, npz_entry **out, size_t *count,
                            char *why, size_t whylen) {
  *out = NULL;
  *count = 0;
  if (n < 22 || memcmp(d, "PK", 2) != 0) return "is not an .npz (zip) archive";
  size_t eocd = SIZE_MAX;
  for (size_t i = n - 22 + 1; i-- > 0 && n - i <= 22 + 65535;)
    if (rd32(d + i) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == SIZE_MAX) return "is not a complete zip archive (no end of central directory)";
  uint64_t entries = rd16(d + eocd + 10), cd = rd32(d + eocd + 16);
  if ((entries == 0xffff || cd == 0xffffffffu) && eocd >= 20 && rd32(d + eocd - 20) == 0x07064b50) {
    uint64_t z = rd64(d + eocd - 20 + 8);
    if (z + 56 > n || rd32(d + z) != 0x06064b50) return "has a broken zip64 directory";
    entries = rd64(d + z + 32);
    cd = rd64(d + z + 48);
  }
  if (entries > 4096) return "has more than 4096 entries";
  npz_entry *list = calloc(entries ? entries : 1, sizeof *list);
  if (list == NULL) abort();
  uint64_t p = cd;
  for (uint64_t i = 0; i < entries; i++) {
    if (p + 46 > n || rd32(d + p) != 0x02014b50) {
      *out = list, *count = i;
      return "has a broken central directory";
    }
    unsigned method = rd16(d + p + 10);
    uint32_t crc = rd32(d + p + 16);
    uint64_t csize = rd32(d + p + 20), usize = rd32(d + p + 24), local = rd32(d + p + 42);
    size_t nlen = rd16(d + p + 28), xlen = rd16(d + p + 30), clen = rd16(d + p + 32);
    if (p + 46 + nlen + xlen + clen > n) {
      *out = list, *count = i;
      return "has a broken central directory";
    }
    const unsigned char *x = d + p + 46 + nlen, *xend = x + xlen;
    while (x + 4 <= xend) {
      unsigned id = rd16(x), len = rd16(x + 2);
      if (x + 4 + len > xend) break;
      if (id == 1) {
        const unsigned char *q = x + 4, *qend = q + len;
        if (usize == 0xffffffffu && q + 8 <= qend) usize = rd64(q), q += 8;
        if (csize == 0xffffffffu && q + 8 <= qend) csize = rd64(q), q += 8;
        if (local == 0xffffffffu && q + 8 <= qend) local = rd64(q), q += 8;
      }
      x += 4 + len;
    }
    char *name = strndup((const char *)d + p + 46, nlen);
    list[i].key = name;
    *count = i + 1;
    if (method != 0) {
      *out = list;
      snprintf(why, whylen, "entry '%s' is compressed (zip method %u)", name, method);
      return why;
    }
    if (local + 30 > n || rd32(d + local) != 0x04034b50) {
      *out = list;
      return "has a broken local header";
    }
    uint64_t data = local + 30 + rd16(d + local + 26) + rd16(d + local + 28);
    if (csize != usize || data + csize > n) {
      *out = list;
      return "has an entry that runs past its end";
    }
    if (crc32(0, d + data, csize) != crc) {
      *out = list;
      snprintf(why, whylen, "entry '%s' is corrupted (its CRC-32 does not match)", name);
      return why;
    }
    size_t klen = strlen(name);
    if (klen > 4 && !strcmp(name + klen - 4, ".npy")) name[klen - 4] = 0;
    list[i].data = d + data;
    list[i].size = (size_t)csize;
    p += 46 + nlen + xlen + clen;
  }
  *out = list;
  return NULL;
}

static void npz_free(npz_entry *list, size_t count) {
  for (size_t i = 0; i < count; i++) free(list[i].key);
  free(list);
}

typedef struct {
  unsigned char *s;
  size_t n, cap;
} bytes;
static void put(bytes *b, const void *p, size_t n) {
  if (b->n + n > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->n + n) cap *= 2;
    unsigned char *s = realloc(b->s, cap);
    if (s == NULL) abort();
    b->s = s, b->cap = cap;
  }
  memcpy(b->s + b->n, p, n);
  b->n += n;
}
static void put16(bytes *b, unsigned v) {
  unsigned char c[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
  put(b, c, 2);
}
static void put32(bytes *b, uint32_t v) {
  unsigned char c[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                        (unsigned char)(v >> 24)};
  put(b, c, 4);
}

/* --- main ---------------------------------------------------------------------------------- */

typedef struct {
  const char *model, *plugin, *platform, *inputs, *output, *outdir;
  const char **input;
  int ninput;
  long repeat;
  bool verbose;
} options;

static int parse_args(int argc, char **argv, options *o) {
  memset(o, 0, sizeof *o);
  o->repeat = 1;
  o->input = calloc((size_t)argc, sizeof *o->input);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char **target = NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      fputs(USAGE, stdout);
      exit(0);
    } else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      o->verbose = true;
      continue;
    } else if (!strcmp(a, "--plugin")) {
      target = &o->plugin;
    } else if (!strcmp(a, "--platform")) {
      target = &o->platform;
    } else if (!strcmp(a, "--input")) {
      if (i + 1 >= argc) return usage("argument --input: expected a .npy file");
      o->input[o->ninput++] = argv[++i];
      continue;
    } else if (!strcmp(a, "--inputs")) {
      target = &o->inputs;
    } else if (!strcmp(a, "--output")) {
      target = &o->output;
    } else if (!strcmp(a, "-o")) {
      target = &o->outdir;
    } else if (!strcmp(a, "--repeat")) {
      if (i + 1 >= argc) return usage("argument --repeat: expected a count");
      char *end;
      errno = 0;
      o->repeat = strtol(argv[++i], &end, 10);
      if (*end || errno || o->repeat < 1 || o->repeat > 1000000000)
        return usage("argument --repeat: '%s' is not a count from 1; give e.g. --repeat 100",
                     argv[i]);
      continue;
    } else if (a[0] == '-' && a[1] != 0) {
      return usage("unrecognized argument '%s'", a);
    } else {
      if (o->model != NULL) return usage("unrecognized argument '%s' (one model only)", a);
      o->model = a;
      continue;
    }
    if (i + 1 >= argc) return usage("argument %s: expected a value", a);
    if (*target != NULL) return usage("argument %s given twice", a);
    *target = argv[++i];
  }
  if (o->model == NULL) return usage("the following arguments are required: MODEL.aotx");
  if (o->plugin && o->platform) return usage("give --plugin or --platform, not both");
  if (o->output && o->outdir) return usage("give --output OUT.npz or -o DIR, not both");
  if (o->ninput && o->inputs) return usage("give --input files or --inputs IN.npz, not both");
  if (o->output) {
    size_t n = strlen(o->output);
    if (n < 4 || strcmp(o->output + n - 4, ".npz"))
      return usage("argument --output: '%s' is not an .npz file name; give e.g. out.npz, or -o DIR "
                   "for .npy files",
                   o->output);
  }
  return 0;
}

static void spec_of(const aotkit_leaf *l, char *buf, size_t n) {
  size_t k = (size_t)snprintf(buf, n, "%s[", l->dtype);
  for (int i = 0; i < l->rank && k < n; i++)
    k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? "," : "", (long long)l->dims[i]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

/* Checks one input file's array against its leaf; 0 or an exit status. */
static int check_input(const char *where, const aotkit_leaf *l, const npy *a) {
  char want[16], have[256], spec[1200];
  descr_of(l, want, sizeof want);
  spec_of(l, spec, sizeof spec);
  bool same = descr_matches(a->descr, want) && a->rank == l->rank;
  for (int k = 0; same && k < l->rank; k++) same = a->dims[k] == l->dims[k];
  if (!same) {
    size_t k = (size_t)snprintf(have, sizeof have, "%s (", a->descr);
    for (int i = 0; i < a->rank && k < sizeof have; i++)
      k += (size_t)snprintf(have + k, sizeof have - k, "%s%lld", i ? ", " : "", (long long)a->dims[i]);
    if (k < sizeof have) snprintf(have + k, sizeof have - k, "%s)", a->rank == 1 ? "," : "");
    return error("%s: leaf %s is %s (NumPy %s), the file holds a %s array; give an array of "
                 "that dtype and shape",
                 where, l->name, spec, want, have);
  }
  if (a->nbytes != l->nbytes)
    return error("%s: leaf %s: the file has %zu data bytes, its %s needs %zu; write it again "
                 "with np.save",
                 where, l->name, a->nbytes, spec, l->nbytes);
  return 0;
}

int main(int argc, char **argv) {
  double t0 = now();
  options o;
  int rc = parse_args(argc, argv, &o);
  if (rc) return rc;
  crc_init();
  char err[AOTKIT_ERROR_SIZE];
  aotkit_artifact *art = NULL;
  aotkit_runtime *rt = NULL;
  aotkit_program *prog = NULL;
  unsigned char **files = calloc((size_t)o.ninput + 1, sizeof *files);
  unsigned char *archive = NULL;
  npz_entry *entries = NULL;
  size_t nentries = 0;
  const void **in = NULL;
  npy *arrays = NULL;
  char **wheres = NULL;
  void **outs = NULL;
  size_t nin = 0, nout = 0;
  rc = 1;
  if (aotkit_artifact_open(o.model, &art, err, sizeof err)) {
    error("%s", err);
    goto done;
  }
  nin = aotkit_artifact_num_inputs(art);
  bool symbolic = aotkit_artifact_num_specializations(art) > 0;
  for (size_t i = 0; i < nin; i++)
    for (int k = 0; k < aotkit_artifact_input(art, i)->rank; k++)
      symbolic |= aotkit_artifact_input(art, i)->dims[k] < 0;
  if (!symbolic && aotkit_artifact_runnable(art, err, sizeof err)) {
    error("%s", err);
    goto done;
  }
  nout = aotkit_artifact_num_outputs(art);
  if (o.verbose) fprintf(stderr, "aotkit-run: %s: %s\n", o.model, aotkit_artifact_signature(art));
  in = calloc(nin + 1, sizeof *in);
  arrays = calloc(nin + 1, sizeof *arrays);
  wheres = calloc(nin + 1, sizeof *wheres);
  if (arrays == NULL || wheres == NULL) abort();
  outs = calloc(nout + 1, sizeof *outs);
  if (in == NULL || outs == NULL) abort();
  /* inputs, checked before any plugin starts */
  if (o.ninput) {
    if ((size_t)o.ninput != nin) {
      error("--input: %s takes %zu input leaves, got %d .npy file(s); give one per leaf, in "
            "flat order: %s",
            aotkit_artifact_name(art), nin, o.ninput, aotkit_artifact_signature(art));
      goto done;
    }
    for (size_t i = 0; i < nin; i++) {
      size_t n;
      char where[600];
      snprintf(where, sizeof where, "--input %s", o.input[i]);
      if (read_file(o.input[i], "--input", &files[i], &n)) goto done;
      npy a;
      const char *e = parse_npy(files[i], n, &a);
      if (e) {
        error("%s: the file %s; give a file written by np.save", where, e);
        goto done;
      }
      arrays[i] = a;
      wheres[i] = strdup(where);
    }
  } else if (o.inputs) {
    size_t n;
    char why[512];
    if (read_file(o.inputs, "--inputs", &archive, &n)) goto done;
    const char *e = read_npz(archive, n, &entries, &nentries, why, sizeof why);
    if (e) {
      error("--inputs %s: %s; write it with np.savez (uncompressed; np.savez_compressed is not "
            "read)",
            o.inputs, e);
      goto done;
    }
    for (size_t i = 0; i < nin; i++) {
      const aotkit_leaf *l = aotkit_artifact_input(art, i);
      const npz_entry *found = NULL;
      for (size_t k = 0; k < nentries; k++)
        if (!strcmp(entries[k].key, l->name)) found = &entries[k];
      if (found == NULL) {
        error("--inputs %s has no array for leaf %s of %s; add it under the key \"%s\"", o.inputs,
              l->name, aotkit_artifact_signature(art), l->name);
        goto done;
      }
      npy a;
      char where[600];
      snprintf(where, sizeof where, "--inputs %s", o.inputs);
      e = parse_npy(found->data, found->size, &a);
      if (e) {
        error("%s: entry %s %s; write it with np.savez", where, l->name, e);
        goto done;
      }
      arrays[i] = a;
      wheres[i] = strdup(where);
    }
    for (size_t k = 0; k < nentries; k++) {
      bool known = false;
      for (size_t i = 0; i < nin; i++) known |= !strcmp(entries[k].key, aotkit_artifact_input(art, i)->name);
      if (!known) {
        error("--inputs %s: '%s' is no input leaf of %s; name the arrays by leaf path", o.inputs,
              entries[k].key, aotkit_artifact_signature(art));
        goto done;
      }
    }
  } else if (nin > 0) {
    error("%s: %s takes %zu input leaves; give them with --input X.npy (one per leaf, in flat "
          "order) or --inputs IN.npz (keyed by leaf path)",
          o.model, aotkit_artifact_signature(art), nin);
    goto done;
  }
  if (symbolic) {
    /* the held specialization whose shapes the inputs have */
    size_t held = aotkit_artifact_num_specializations(art);
    bool matched = false;
    for (size_t s = 0; s < held && !matched; s++) {
      if (aotkit_artifact_select(art, s, err, sizeof err)) continue;
      matched = true;
      for (size_t i = 0; i < nin && matched; i++) {
        const aotkit_leaf *l = aotkit_artifact_input(art, i);
        matched = arrays[i].rank == l->rank;
        for (int k = 0; matched && k < l->rank; k++) matched = arrays[i].dims[k] == l->dims[k];
      }
    }
    if (!matched) {
      char shapes[2048] = "", list[2048] = "";
      size_t k = 0;
      for (size_t i = 0; i < nin && k < sizeof shapes; i++) {
        k += (size_t)snprintf(shapes + k, sizeof shapes - k, "%s%s: (", i ? ", " : "",
                              aotkit_artifact_input(art, i)->name);
        for (int d = 0; d < arrays[i].rank && k < sizeof shapes; d++)
          k += (size_t)snprintf(shapes + k, sizeof shapes - k, "%s%lld", d ? ", " : "",
                                (long long)arrays[i].dims[d]);
        if (k < sizeof shapes)
          k += (size_t)snprintf(shapes + k, sizeof shapes - k, "%s)", arrays[i].rank == 1 ? "," : "");
      }
      k = 0;
      for (size_t s = 0; s < held && k < sizeof list; s++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s%s", s ? "; " : "",
                              aotkit_artifact_specialization(art, s));
      error("%s: the inputs' shapes (%s) are no specialization %s holds (%s); give inputs of "
            "one of those shapes, or run it with aotkit.load in Python, which compiles others",
            o.model, shapes, aotkit_artifact_signature(art), held ? list : "none");
      goto done;
    }
    if (aotkit_artifact_runnable(art, err, sizeof err)) {
      error("%s", err);
      goto done;
    }
  }
  for (size_t i = 0; i < nin; i++) {
    if (check_input(wheres[i], aotkit_artifact_input(art, i), &arrays[i])) goto done;
    in[i] = arrays[i].data;
  }
  double t_load = now();
  if (aotkit_runtime_open(o.plugin, o.platform, &rt, err, sizeof err)) {
    error("%s", err);
    goto done;
  }
  double t_plugin = now();
  if (o.verbose) {
    const char *w = aotkit_runtime_stablehlo_window(rt);
    fprintf(stderr, "aotkit-run: plugin %s, platform %s%s%s\n", aotkit_runtime_plugin_path(rt),
            aotkit_runtime_platform(rt), w[0] ? ", StableHLO " : "", w);
  }
  if (aotkit_program_load(rt, art, &prog, err, sizeof err)) {
    error("%s", err);
    goto done;
  }
  double t_compile = now();
  if (o.verbose) fprintf(stderr, "aotkit-run: %s\n", aotkit_program_how(prog));
  for (size_t i = 0; i < nout; i++) {
    const aotkit_leaf *l = aotkit_artifact_output(art, i);
    outs[i] = malloc(l->nbytes ? l->nbytes : 1);
    if (outs[i] == NULL) {
      error("%s: cannot allocate %zu bytes for %s; free memory", o.model, l->nbytes, l->name);
      goto done;
    }
  }
  double best = 1e300, sum = 0, first = 0;
  for (long r = 0; r < o.repeat; r++) {
    double s = now();
    if (aotkit_program_call(prog, in, nin, outs, nout, err, sizeof err)) {
      error("%s", err);
      goto done;
    }
    double t = now() - s;
    if (r == 0) first = now() - t0;
    best = t < best ? t : best;
    sum += t;
  }
  /* results */
  for (size_t i = 0; i < nout; i++) {
    char spec[1200];
    spec_of(aotkit_artifact_output(art, i), spec, sizeof spec);
    printf("%s: %s\n", aotkit_artifact_output(art, i)->name, spec);
  }
  fflush(stdout);
  if (o.output || o.outdir) {
    bytes zip = {0}, cdir = {0};
    size_t nfiles = 0;
    if (o.outdir) {
      struct stat st;
      if (stat(o.outdir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        error("-o: %s is not a folder; create it first", o.outdir);
        goto done;
      }
    }
    for (size_t i = 0; i < nout; i++) {
      const aotkit_leaf *l = aotkit_artifact_output(art, i);
      char head[4096];
      size_t hn = npy_header(head, l, l->dims);
      bytes one = {0};
      put(&one, head, hn);
      put(&one, outs[i], l->nbytes);
      if (o.outdir) {
        /* One file in DIR per output: a '/' in the leaf's name (a dict key's) would make
         * the path leave DIR or name a folder, so it is written %2F (and '%' as %25). */
        char file[3 * 1024 + 8], path[4096 + sizeof file];
        size_t fn = 0;
        for (const char *p = l->name; *p && fn + 4 < sizeof file - 5; p++) {
          if (*p == '/' || *p == '%') {
            fn += (size_t)snprintf(file + fn, sizeof file - fn, "%%%02X", (unsigned char)*p);
          } else {
            file[fn++] = *p;
          }
        }
        snprintf(file + fn, sizeof file - fn, ".npy");
        snprintf(path, sizeof path, "%s/%s", o.outdir, file);
        int w = write_file(path, "-o", one.s, one.n);
        free(one.s);
        if (w) goto done;
        continue;
      }
      if (one.n >= 0xffffffffu || zip.n >= 0xffffffffu) {
        free(one.s);
        free(zip.s);
        free(cdir.s);
        error("--output: %s is over 4 GiB, past what this runner writes in an .npz; use -o DIR",
              l->name);
        goto done;
      }
      char name[1100];
      int nl = snprintf(name, sizeof name, "%s.npy", l->name);
      uint32_t crc = crc32(0, one.s, one.n);
      size_t local = zip.n;
      put32(&zip, 0x04034b50), put16(&zip, 20), put16(&zip, 0), put16(&zip, 0);
      put16(&zip, 0), put16(&zip, 0x21);
      put32(&zip, crc), put32(&zip, (uint32_t)one.n), put32(&zip, (uint32_t)one.n);
      put16(&zip, (unsigned)nl), put16(&zip, 0);
      put(&zip, name, (size_t)nl);
      put(&zip, one.s, one.n);
      put32(&cdir, 0x02014b50), put16(&cdir, 20), put16(&cdir, 20), put16(&cdir, 0);
      put16(&cdir, 0), put16(&cdir, 0), put16(&cdir, 0x21);
      put32(&cdir, crc), put32(&cdir, (uint32_t)one.n), put32(&cdir, (uint32_t)one.n);
      put16(&cdir, (unsigned)nl), put16(&cdir, 0), put16(&cdir, 0), put16(&cdir, 0);
      put16(&cdir, 0), put32(&cdir, 0x1800000u), put32(&cdir, (uint32_t)local);
      put(&cdir, name, (size_t)nl);
      free(one.s);
      nfiles++;
    }
    if (o.output) {
      size_t cd = zip.n;
      put(&zip, cdir.s ? cdir.s : (unsigned char *)"", cdir.n);
      put32(&zip, 0x06054b50), put16(&zip, 0), put16(&zip, 0);
      put16(&zip, (unsigned)nfiles), put16(&zip, (unsigned)nfiles);
      put32(&zip, (uint32_t)cdir.n), put32(&zip, (uint32_t)cd), put16(&zip, 0);
      int w = write_file(o.output, "--output", zip.s, zip.n);
      free(zip.s);
      free(cdir.s);
      if (w) goto done;
    }
  }
  if (o.verbose) {
    fprintf(stderr,
            "aotkit-run: start to first result %.1f ms (read %.1f ms, plugin %.1f ms, %s %.1f "
            "ms)\n",
            first * 1e3, (t_load - t0) * 1e3, (t_plugin - t_load) * 1e3, "prepare",
            (t_compile - t_plugin) * 1e3);
  }
  if (o.repeat > 1 || o.verbose)
    fprintf(stderr, "aotkit-run: %s: %ld call(s), best %.3f ms, mean %.3f ms\n",
            aotkit_artifact_name(art), o.repeat, best * 1e3, sum / (double)o.repeat * 1e3);
  rc = 0;
done:
  for (size_t i = 0; i < nout && outs; i++) free(outs[i]);
  free(outs);
  free(in);
  free(arrays);
  for (size_t i = 0; wheres != NULL && i < nin; i++) free(wheres[i]);
  free(wheres);
  for (int i = 0; i < o.ninput; i++) free(files[i]);
  free(files);
  npz_free(entries, nentries);
  free(archive);
  free(o.input);
  aotkit_program_free(&prog);
  aotkit_runtime_close(&rt);
  aotkit_artifact_close(&art);
  return rc;
}
