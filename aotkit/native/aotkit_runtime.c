/* aotkit_runtime.c: the artifact reader and PJRT runner behind aotkit_runtime.h.
 *
 * Reading follows aotkit/artifacts.py (docs/artifact-format.md) check for check and in the
 * same order, so a file is refused with the same fault: magic, the 48-byte prefix, format
 * version, header size and SHA-256, the header as strict UTF-8 JSON without repeated keys,
 * its fields, the file size against the section table, every section's SHA-256. What C
 * cannot know is documented in docs/deploy.md: pytree node types registered in a Python
 * process (any `node` name is read, its children named by index), and Unicode's unassigned
 * code points in the printable checks.
 *
 * Running goes through the PJRT C API (pjrt_c_api.h, from the xla-cpu-pjrt wheel): dlopen,
 * GetPjrtApi, PJRT_Plugin_Initialize, PJRT_Client_Create, then PJRT_Client_Compile of the
 * portable StableHLO (format "mlir") with a hand-encoded CompileOptionsProto, or
 * PJRT_Executable_DeserializeAndLoad of the executable section where the plugin's platform
 * and version are the target's.
 */
#define _GNU_SOURCE
#include "aotkit_runtime.h"

#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pjrt_c_api.h"

#define FORMAT_VERSION 4u
#define MIN_FORMAT_VERSION 1u
#define PREFIX_SIZE 48u
#define MAX_HEADER_BYTES (16u << 20)
#define MAX_SECTIONS 64
#define MAX_TREE_DEPTH 256
#define MAX_JSON_DEPTH 900 /* about where Python's json module raises RecursionError */
#define MAX_FILE_BYTES ((uint64_t)4 << 30)
#define REWRITE "the file is not one aotkit wrote, or was changed: write it again"
#define UNPRINTABLE "a control or other unprintable character"

static const unsigned char MAGIC[8] = {0x89, 'A', 'O', 'T', '\r', '\n', 0x1a, '\n'};
static const char PORTABLE[] = "stablehlo";
static const char EXECUTABLE[] = "executable";
/* Older copies of the portable module: "stablehlo@1.9.0" (aotkit/native/portable.py). */
static const char PORTABLE_AT[] = "stablehlo@";

enum { MAGIC_ARTIFACT = 0x41417274, MAGIC_RUNTIME = 0x41415274, MAGIC_PROGRAM = 0x41415072 };

/* --- errors ----------------------------------------------------------------------------- */

static int fail(char *err, size_t errlen, int code, const char *fmt, ...) {
  if (err != NULL && errlen > 0) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
  }
  return code;
}

/* A growable string. */
typedef struct {
  char *s;
  size_t n, cap;
} sbuf;

static void sb_add(sbuf *b, const char *text, size_t n) {
  if (b->n + n + 1 > b->cap) {
    size_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + n + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (s == NULL) abort();
    b->s = s;
    b->cap = cap;
  }
  memcpy(b->s + b->n, text, n);
  b->n += n;
  b->s[b->n] = 0;
}
static void sb_puts(sbuf *b, const char *text) { sb_add(b, text, strlen(text)); }
static void sb_printf(sbuf *b, const char *fmt, ...) {
  char tmp[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof tmp) {
    sb_add(b, tmp, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (big == NULL) abort();
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  sb_add(b, big, (size_t)n);
  free(big);
}
static char *sb_take(sbuf *b) {
  if (b->s == NULL) sb_add(b, "", 0);
  char *s = b->s;
  b->s = NULL;
  b->n = b->cap = 0;
  return s;
}

/* --- SHA-256 (FIPS 180-4) --------------------------------------------------------------- */

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const unsigned char *p) {
  uint32_t w[64];
  for (int i = 0; i < 16; i++)
    w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 |
           p[4 * i + 3];
  for (int i = 16; i < 64; i++) {
    uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
    uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
  for (int i = 0; i < 64; i++) {
    uint32_t t1 = k + (ROR(e, 6) ^ ROR(e, 11) ^ ROR(e, 25)) + ((e & f) ^ (~e & g)) + K256[i] + w[i];
    uint32_t t2 = (ROR(a, 2) ^ ROR(a, 13) ^ ROR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    k = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += k;
}

static void sha256(const unsigned char *data, size_t n, unsigned char out[32]) {
  uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  size_t i = 0;
  for (; i + 64 <= n; i += 64) sha256_block(h, data + i);
  unsigned char tail[128] = {0};
  size_t rest = n - i;
  memcpy(tail, data + i, rest);
  tail[rest] = 0x80;
  size_t len = rest + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = (uint64_t)n * 8;
  for (int j = 0; j < 8; j++) tail[len - 1 - j] = (unsigned char)(bits >> (8 * j));
  sha256_block(h, tail);
  if (len == 128) sha256_block(h, tail + 64);
  for (int j = 0; j < 8; j++) {
    out[4 * j] = (unsigned char)(h[j] >> 24);
    out[4 * j + 1] = (unsigned char)(h[j] >> 16);
    out[4 * j + 2] = (unsigned char)(h[j] >> 8);
    out[4 * j + 3] = (unsigned char)h[j];
  }
}

static void sha256_hex(const unsigned char *data, size_t n, char out[65]) {
  unsigned char d[32];
  sha256(data, n, d);
  for (int i = 0; i < 32; i++) snprintf(out + 2 * i, 3, "%02x", d[i]);
}

/* --- UTF-8 and printable text ----------------------------------------------------------- */

/* Decodes one code point at s[*i] (valid UTF-8 or the WTF-8 of a lone surrogate). */
static uint32_t utf8_next(const char *s, size_t n, size_t *i) {
  const unsigned char *u = (const unsigned char *)s;
  uint32_t c = u[*i];
  int extra = c < 0x80 ? 0 : c < 0xe0 ? 1 : c < 0xf0 ? 2 : 3;
  if (extra == 1) c &= 0x1f;
  if (extra == 2) c &= 0x0f;
  if (extra == 3) c &= 0x07;
  (*i)++;
  for (int k = 0; k < extra && *i < n; k++) c = (c << 6) | (u[(*i)++] & 0x3f);
  return c;
}

/* Python's str.isprintable, but for Unicode's unassigned code points (Cn), which need its
 * tables: control (Cc), format (Cf), surrogate (Cs), private use (Co), separators (Zl, Zp,
 * Zs but the space) are not printable. */
static bool code_printable(uint32_t c) {
  if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad) return false;
  if ((c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f || c == 0x890 ||
      c == 0x891 || c == 0x8e2 || c == 0x180e || c == 0x1680)
    return false;
  if ((c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
      (c >= 0x205f && c <= 0x2064) || (c >= 0x2066 && c <= 0x206f) || c == 0x3000)
    return false;
  if ((c >= 0xd800 && c <= 0xf8ff) || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb)) return false;
  if (c == 0x110bd || c == 0x110cd || (c >= 0x13430 && c <= 0x1343f) ||
      (c >= 0x1bca0 && c <= 0x1bca3) || (c >= 0x1d173 && c <= 0x1d17a))
    return false;
  if (c == 0xe0001 || (c >= 0xe0020 && c <= 0xe007f) || c >= 0xf0000) return false;
  return true;
}

static bool text_printable(const char *s, size_t n) {
  for (size_t i = 0; i < n;)
    if (!code_printable(utf8_next(s, n, &i))) return false;
  return true;
}

/* Strict UTF-8, as Python's bytes.decode("utf-8"): no overlongs, surrogates or > U+10FFFF. */
static bool utf8_valid(const unsigned char *s, size_t n, size_t *bad) {
  size_t i = 0;
  while (i < n) {
    unsigned char c = s[i];
    size_t len;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      len = 2, cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3, cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4, cp = c & 0x07;
    } else {
      *bad = i;
      return false;
    }
    if (i + len > n) {
      *bad = i;
      return false;
    }
    for (size_t k = 1; k < len; k++) {
      if ((s[i + k] & 0xc0) != 0x80) {
        *bad = i;
        return false;
      }
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if ((len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
        (len == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
      *bad = i;
      return false;
    }
    i += len;
  }
  return true;
}

/* Appends `s` as Python's repr() of a str shows it: quoted, escaped. */
static void sb_repr(sbuf *b, const char *s, size_t n) {
  bool squote = memchr(s, '\'', n) != NULL, dquote = memchr(s, '"', n) != NULL;
  char q = squote && !dquote ? '"' : '\'';
  sb_add(b, &q, 1);
  for (size_t i = 0; i < n;) {
    size_t start = i;
    uint32_t c = utf8_next(s, n, &i);
    if (c == (uint32_t)q || c == '\\') {
      char e[2] = {'\\', (char)c};
      sb_add(b, e, 2);
    } else if (c == '\n') {
      sb_puts(b, "\\n");
    } else if (c == '\r') {
      sb_puts(b, "\\r");
    } else if (c == '\t') {
      sb_puts(b, "\\t");
    } else if (code_printable(c)) {
      sb_add(b, s + start, i - start);
    } else if (c < 0x100) {
      sb_printf(b, "\\x%02x", c);
    } else if (c < 0x10000) {
      sb_printf(b, "\\u%04x", c);
    } else {
      sb_printf(b, "\\U%08x", c);
    }
  }
  sb_add(b, &q, 1);
}

/* --- JSON (RFC 8259, as Python's json.loads reads it) ------------------------------------ */

typedef enum { J_NULL, J_BOOL, J_NUM, J_STR, J_ARR, J_OBJ } jtype;

typedef struct jval {
  jtype t;
  bool b;
  bool is_int; /* an integer literal (no fraction or exponent) */
  bool big;    /* an integer literal outside int64 */
  int64_t i;
  double d;
  char *s; /* J_STR: UTF-8 (WTF-8 for lone surrogates), NUL-terminated */
  size_t slen;
  struct jval *items; /* J_ARR, J_OBJ values */
  char **keys;        /* J_OBJ */
  size_t *keylens;
  size_t n;
} jval;

typedef struct {
  const char *p, *end, *start;
  char msg[256];
  int depth;
} jparser;

static void jfree(jval *v) {
  if (v == NULL) return;
  free(v->s);
  for (size_t i = 0; i < v->n; i++) {
    jfree(&v->items[i]);
    if (v->keys) free(v->keys[i]);
  }
  free(v->items);
  free(v->keys);
  free(v->keylens);
  memset(v, 0, sizeof *v);
}

static bool jerr(jparser *j, const char *what) {
  if (!j->msg[0])
    snprintf(j->msg, sizeof j->msg, "%s: char %zu", what, (size_t)(j->p - j->start));
  return false;
}

static void jws(jparser *j) {
  while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
    j->p++;
}

static void put_utf8(sbuf *b, uint32_t c) {
  char out[4];
  size_t n;
  if (c < 0x80) {
    out[0] = (char)c, n = 1;
  } else if (c < 0x800) {
    out[0] = (char)(0xc0 | c >> 6), out[1] = (char)(0x80 | (c & 0x3f)), n = 2;
  } else if (c < 0x10000) {
    out[0] = (char)(0xe0 | c >> 12), out[1] = (char)(0x80 | ((c >> 6) & 0x3f));
    out[2] = (char)(0x80 | (c & 0x3f)), n = 3;
  } else {
    out[0] = (char)(0xf0 | c >> 18), out[1] = (char)(0x80 | ((c >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3f)), out[3] = (char)(0x80 | (c & 0x3f)), n = 4;
  }
  sb_add(b, out, n);
}

static bool jhex4(jparser *j, uint32_t *out) {
  if (j->end - j->p < 4) return jerr(j, "Invalid \\uXXXX escape");
  uint32_t c = 0;
  for (int k = 0; k < 4; k++) {
    char h = j->p[k];
    c <<= 4;
    if (h >= '0' && h <= '9') c |= (uint32_t)(h - '0');
    else if (h >= 'a' && h <= 'f') c |= (uint32_t)(h - 'a' + 10);
    else if (h >= 'A' && h <= 'F') c |= (uint32_t)(h - 'A' + 10);
    else return jerr(j, "Invalid \\uXXXX escape");
  }
  j->p += 4;
  *out = c;
  return true;
}

static bool jstring(jparser *j, char **out, size_t *outlen) {
  sbuf b = {0};
  j->p++; /* the opening quote */
  while (1) {
    if (j->p >= j->end) {
      free(b.s);
      return jerr(j, "Unterminated string");
    }
    unsigned char c = (unsigned char)*j->p;
    if (c == '"') {
      j->p++;
      break;
    }
    if (c < 0x20) {
      free(b.s);
      return jerr(j, "Invalid control character");
    }
    if (c != '\\') {
      const char *q = j->p;
      while (q < j->end && *q != '"' && *q != '\\' && (unsigned char)*q >= 0x20) q++;
      sb_add(&b, j->p, (size_t)(q - j->p));
      j->p = q;
      continue;
    }
    j->p++;
    if (j->p >= j->end) {
      free(b.s);
      return jerr(j, "Unterminated string");
    }
    char e = *j->p++;
    const char *simple = strchr("\"\\/bfnrt", e);
    if (e != 0 && simple != NULL) {
      static const char map[] = "\"\\/\b\f\n\r\t";
      sb_add(&b, &map[simple - "\"\\/bfnrt"], 1);
    } else if (e == 'u') {
      uint32_t cp;
      if (!jhex4(j, &cp)) {
        free(b.s);
        return false;
      }
      if (cp >= 0xd800 && cp <= 0xdbff && j->end - j->p >= 6 && j->p[0] == '\\' &&
          j->p[1] == 'u') {
        const char *save = j->p;
        uint32_t lo;
        j->p += 2;
        if (jhex4(j, &lo) && lo >= 0xdc00 && lo <= 0xdfff) {
          cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
        } else {
          j->msg[0] = 0;
          j->p = save;
        }
      }
      put_utf8(&b, cp);
    } else {
      free(b.s);
      return jerr(j, "Invalid \\escape");
    }
  }
  *outlen = b.n;
  *out = sb_take(&b);
  return true;
}

static bool jvalue(jparser *j, jval *v);

static bool jnumber(jparser *j, jval *v) {
  const char *s = j->p;
  if (j->p < j->end && *j->p == '-') j->p++;
  if (j->end - j->p >= 8 && memcmp(j->p, "Infinity", 8) == 0) {
    j->p += 8;
    v->t = J_NUM;
    v->d = *s == '-' ? -INFINITY : INFINITY;
    return true;
  }
  if (j->p >= j->end || *j->p < '0' || *j->p > '9') return jerr(j, "Expecting value");
  if (*j->p == '0') j->p++;
  else
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  bool is_int = true;
  if (j->p + 1 < j->end && *j->p == '.' && j->p[1] >= '0' && j->p[1] <= '9') {
    is_int = false;
    j->p++;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
  }
  if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
    const char *q = j->p + 1;
    if (q < j->end && (*q == '+' || *q == '-')) q++;
    if (q < j->end && *q >= '0' && *q <= '9') {
      is_int = false;
      while (q < j->end && *q >= '0' && *q <= '9') q++;
      j->p = q;
    }
  }
  char tmp[64];
  size_t len = (size_t)(j->p - s);
  v->t = J_NUM;
  v->is_int = is_int;
  if (is_int && len - (*s == '-') > 4300) {
    /* Python's int() limit for decimal text (sys.get_int_max_str_digits) */
    snprintf(j->msg, sizeof j->msg,
             "Exceeds the limit (4300 digits) for integer string conversion: value has %zu "
             "digits",
             len - (*s == '-'));
    return false;
  }
  if (is_int) {
    /* digits beyond int64: a Python int all the same, marked big */
    bool neg = *s == '-';
    uint64_t acc = 0;
    for (const char *q = s + neg; q < j->p; q++) {
      unsigned d = (unsigned)(*q - '0');
      if (acc > (UINT64_MAX - d) / 10) {
        v->big = true;
        break;
      }
      acc = acc * 10 + d;
    }
    if (!v->big && (neg ? acc > (uint64_t)INT64_MAX + 1 : acc > (uint64_t)INT64_MAX)) v->big = true;
    if (!v->big) v->i = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    v->d = v->big ? (neg ? -1e300 : 1e300) : (double)v->i;
  } else {
    if (len >= sizeof tmp) {
      char *big = strndup(s, len);
      v->d = strtod(big, NULL);
      free(big);
    } else {
      memcpy(tmp, s, len);
      tmp[len] = 0;
      v->d = strtod(tmp, NULL);
    }
  }
  return true;
}

static bool jvalue(jparser *j, jval *v) {
  memset(v, 0, sizeof *v);
  jws(j);
  if (j->p >= j->end) return jerr(j, "Expecting value");
  char c = *j->p;
  if (c == '"') {
    v->t = J_STR;
    return jstring(j, &v->s, &v->slen);
  }
  if (c == '{' || c == '[') {
    if (++j->depth > MAX_JSON_DEPTH) return jerr(j, "maximum recursion depth exceeded");
    bool obj = c == '{';
    v->t = obj ? J_OBJ : J_ARR;
    j->p++;
    jws(j);
    size_t cap = 0;
    if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
      j->p++;
      j->depth--;
      return true;
    }
    while (1) {
      if (v->n == cap) {
        cap = cap ? cap * 2 : 4;
        jval *items = realloc(v->items, cap * sizeof *items);
        if (items == NULL) abort();
        v->items = items;
        if (obj) {
          char **keys = realloc(v->keys, cap * sizeof *keys);
          size_t *lens = realloc(v->keylens, cap * sizeof *lens);
          if (keys == NULL || lens == NULL) abort();
          v->keys = keys, v->keylens = lens;
        }
      }
      if (obj) {
        jws(j);
        if (j->p >= j->end || *j->p != '"')
          return jerr(j, "Expecting property name enclosed in double quotes");
        char *key;
        size_t klen;
        if (!jstring(j, &key, &klen)) return false;
        for (size_t k = 0; k < v->n; k++)
          if (v->keylens[k] == klen && memcmp(v->keys[k], key, klen) == 0) {
            sbuf m = {0};
            sb_puts(&m, "key ");
            sb_repr(&m, key, klen);
            sb_puts(&m, " appears twice");
            snprintf(j->msg, sizeof j->msg, "%s", m.s);
            free(m.s);
            free(key);
            return false;
          }
        v->keys[v->n] = key;
        v->keylens[v->n] = klen;
        jws(j);
        if (j->p >= j->end || *j->p != ':') {
          v->items[v->n].t = J_NULL;
          v->items[v->n].s = NULL;
          memset(&v->items[v->n], 0, sizeof(jval));
          v->n++;
          return jerr(j, "Expecting ':' delimiter");
        }
        j->p++;
      }
      bool ok = jvalue(j, &v->items[v->n]);
      v->n++;
      if (!ok) return false;
      jws(j);
      if (j->p < j->end && *j->p == ',') {
        j->p++;
        continue;
      }
      if (j->p < j->end && *j->p == (obj ? '}' : ']')) {
        j->p++;
        j->depth--;
        return true;
      }
      return jerr(j, obj ? "Expecting ',' delimiter" : "Expecting ',' delimiter");
    }
  }
  if (j->end - j->p >= 4 && memcmp(j->p, "null", 4) == 0) {
    j->p += 4;
    v->t = J_NULL;
    return true;
  }
  if (j->end - j->p >= 4 && memcmp(j->p, "true", 4) == 0) {
    j->p += 4;
    v->t = J_BOOL, v->b = true;
    return true;
  }
  if (j->end - j->p >= 5 && memcmp(j->p, "false", 5) == 0) {
    j->p += 5;
    v->t = J_BOOL;
    return true;
  }
  if (j->end - j->p >= 3 && memcmp(j->p, "NaN", 3) == 0) {
    j->p += 3;
    v->t = J_NUM, v->d = NAN;
    return true;
  }
  return jnumber(j, v);
}

static const jval *jget(const jval *obj, const char *key) {
  if (obj == NULL || obj->t != J_OBJ) return NULL;
  size_t n = strlen(key);
  for (size_t i = 0; i < obj->n; i++)
    if (obj->keylens[i] == n && memcmp(obj->keys[i], key, n) == 0) return &obj->items[i];
  return NULL;
}

/* A short JSON rendering of a value for messages, as artifacts.py's `_short` (60 chars). */
static void jdump(sbuf *b, const jval *v, int depth) {
  if (depth > 8 || b->n > 80) {
    sb_puts(b, "...");
    return;
  }
  switch (v->t) {
  case J_NULL: sb_puts(b, "null"); break;
  case J_BOOL: sb_puts(b, v->b ? "true" : "false"); break;
  case J_NUM:
    if (v->is_int && !v->big) sb_printf(b, "%lld", (long long)v->i);
    else if (isnan(v->d)) sb_puts(b, "NaN");
    else if (isinf(v->d)) sb_puts(b, v->d > 0 ? "Infinity" : "-Infinity");
    else sb_printf(b, "%.17g", v->d);
    break;
  case J_STR:
    sb_puts(b, "\"");
    for (size_t i = 0; i < v->slen; i++) {
      unsigned char c = (unsigned char)v->s[i];
      if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
      else if (c < 0x20 || c >= 0x7f) sb_printf(b, "\\u%04x", c);
      else sb_add(b, (const char *)&c, 1);
    }
    sb_puts(b, "\"");
    break;
  case J_ARR:
  case J_OBJ:
    sb_puts(b, v->t == J_ARR ? "[" : "{");
    for (size_t i = 0; i < v->n; i++) {
      if (i) sb_puts(b, ", ");
      if (v->t == J_OBJ) {
        jval k = {.t = J_STR, .s = v->keys[i], .slen = v->keylens[i]};
        jdump(b, &k, depth + 1);
        sb_puts(b, ": ");
      }
      jdump(b, &v->items[i], depth + 1);
    }
    sb_puts(b, v->t == J_ARR ? "]" : "}");
    break;
  }
}

static char *jshort(const jval *v) {
  sbuf b = {0};
  jdump(&b, v, 0);
  if (b.n > 60) {
    b.n = 57;
    sb_puts(&b, "...");
  }
  return sb_take(&b);
}

/* --- dtypes and specs --------------------------------------------------------------------- */

typedef struct {
  const char *name;
  size_t itemsize;
  PJRT_Buffer_Type pjrt;
  const char *numpy; /* NumPy's (and ml_dtypes') name, which specs may use too */
} dtype_info;

/* aotkit's compact names (aotkit/dtypes.py) with NumPy's storage size. */
static const dtype_info DTYPES[] = {
    {"bool", 1, PJRT_Buffer_Type_PRED, "bool"},
    {"i8", 1, PJRT_Buffer_Type_S8, "int8"},
    {"i16", 2, PJRT_Buffer_Type_S16, "int16"},
    {"i32", 4, PJRT_Buffer_Type_S32, "int32"},
    {"i64", 8, PJRT_Buffer_Type_S64, "int64"},
    {"u8", 1, PJRT_Buffer_Type_U8, "uint8"},
    {"u16", 2, PJRT_Buffer_Type_U16, "uint16"},
    {"u32", 4, PJRT_Buffer_Type_U32, "uint32"},
    {"u64", 8, PJRT_Buffer_Type_U64, "uint64"},
    {"f16", 2, PJRT_Buffer_Type_F16, "float16"},
    {"bf16", 2, PJRT_Buffer_Type_BF16, "bfloat16"},
    {"f32", 4, PJRT_Buffer_Type_F32, "float32"},
    {"f64", 8, PJRT_Buffer_Type_F64, "float64"},
    {"c64", 8, PJRT_Buffer_Type_C64, "complex64"},
    {"c128", 16, PJRT_Buffer_Type_C128, "complex128"},
    {"i2", 1, PJRT_Buffer_Type_S2, "int2"},
    {"i4", 1, PJRT_Buffer_Type_S4, "int4"},
    {"u2", 1, PJRT_Buffer_Type_U2, "uint2"},
    {"u4", 1, PJRT_Buffer_Type_U4, "uint4"},
    {"f8e4m3fn", 1, PJRT_Buffer_Type_F8E4M3FN, "float8_e4m3fn"},
    {"f8e5m2", 1, PJRT_Buffer_Type_F8E5M2, "float8_e5m2"},
    {"f8e4m3", 1, PJRT_Buffer_Type_F8E4M3, "float8_e4m3"},
    {"f8e3m4", 1, PJRT_Buffer_Type_F8E3M4, "float8_e3m4"},
    {"f8e4m3fnuz", 1, PJRT_Buffer_Type_F8E4M3FNUZ, "float8_e4m3fnuz"},
    {"f8e5m2fnuz", 1, PJRT_Buffer_Type_F8E5M2FNUZ, "float8_e5m2fnuz"},
    {"f8e4m3b11fnuz", 1, PJRT_Buffer_Type_F8E4M3B11FNUZ, "float8_e4m3b11fnuz"},
    {"f8e8m0fnu", 1, PJRT_Buffer_Type_F8E8M0FNU, "float8_e8m0fnu"},
    {"f4e2m1fn", 1, PJRT_Buffer_Type_F4E2M1FN, "float4_e2m1fn"},
};
#define NUM_DTYPES (sizeof DTYPES / sizeof DTYPES[0])

typedef struct {
  char *name;
  const dtype_info *dtype;
  int rank;
  int64_t *dims;
  size_t nbytes;
  bool donated;
  bool pruned; /* the executable takes no argument for it: checked, not transferred */
  bool symbolic;
  char *spec;      /* as the header writes it: f32[b,4] */
  char **dimtext;  /* symbolic leaves: each dimension's text (`b`, `2*t+1`) */
} leaf;

/* Parses a spec as aotkit writes it ("f32[2,3]", "bf16[]"); symbolic dimensions (any other
 * dimension text) only where `symbolic`. Returns NULL on success, else what is wrong. */
static const char *parse_spec(const char *text, size_t n, bool symbolic, leaf *out) {
  const char *open = memchr(text, '[', n);
  if (open == NULL || text[n - 1] != ']') return "expected DTYPE[DIM,...]";
  /* As aotkit/dtypes.py reads a name: stripped, in any case; the short name, NumPy's,
     `bool_`, or MLIR's `ui8` for the unsigned types. */
  const char *d0 = text, *d1 = open;
  while (d0 < d1 && (*d0 == ' ' || *d0 == '\t')) d0++;
  while (d1 > d0 && (d1[-1] == ' ' || d1[-1] == '\t')) d1--;
  char low[32];
  size_t dlen = (size_t)(d1 - d0);
  if (dlen >= sizeof low) return "an unknown dtype";
  for (size_t i = 0; i < dlen; i++)
    low[i] = (char)(d0[i] >= 'A' && d0[i] <= 'Z' ? d0[i] + 32 : d0[i]);
  low[dlen] = 0;
  const char *name = low;
  if (!strcmp(low, "bool_")) name = "bool";
  if (low[0] == 'u' && low[1] == 'i' && low[2] >= '0' && low[2] <= '9') {
    memmove(low + 1, low + 2, dlen - 1);
  }
  out->dtype = NULL;
  for (size_t i = 0; i < NUM_DTYPES; i++)
    if (!strcmp(DTYPES[i].name, name) || !strcmp(DTYPES[i].numpy, name)) out->dtype = &DTYPES[i];
  if (out->dtype == NULL) return "an unknown dtype";
  const char *p = open + 1, *end = text + n - 1;
  int rank = 0;
  int64_t dims[64];
  char *texts[64] = {0};
  bool sym = false;
  while (p < end) {
    const char *q = p;
    int nest = 0;
    while (q < end && (nest > 0 || *q != ',')) {
      if (*q == '(') nest++;
      if (*q == ')') nest--;
      q++;
    }
    const char *a = p, *b = q;
    while (a < b && *a == ' ') a++;
    while (b > a && b[-1] == ' ') b--;
    if (a == b) return "an empty dimension";
    if (rank == 64) return "more than 64 dimensions";
    bool digits = true;
    for (const char *c = a; c < b; c++) digits &= *c >= '0' && *c <= '9';
    if (digits) {
      int64_t v = 0;
      for (const char *c = a; c < b; c++) {
        if (v > (INT64_MAX - 9) / 10) return "a dimension too large";
        v = v * 10 + (*c - '0');
      }
      dims[rank++] = v;
    } else if (symbolic) {
      texts[rank] = strndup(a, (size_t)(b - a));
      dims[rank++] = -1;
      sym = true;
    } else {
      return "a symbolic dimension in a header without a symbolic field";
    }
    p = q < end ? q + 1 : q;
    if (q < end && p == end) return "an empty dimension";
  }
  out->rank = rank;
  out->dims = malloc(sizeof(int64_t) * (rank ? rank : 1));
  if (out->dims == NULL) abort();
  memcpy(out->dims, dims, sizeof(int64_t) * rank);
  out->symbolic = sym;
  if (sym) {
    out->dimtext = calloc((size_t)rank, sizeof *out->dimtext);
    if (out->dimtext == NULL) abort();
    memcpy(out->dimtext, texts, sizeof(char *) * (size_t)rank);
  }
  size_t total = out->dtype->itemsize;
  for (int i = 0; i < rank && !sym; i++) {
    if (dims[i] != 0 && total > SIZE_MAX / (size_t)dims[i]) return "a shape too large";
    total *= (size_t)dims[i];
  }
  out->nbytes = sym ? 0 : total;
  return NULL;
}

/* A spec as aotkit prints it: `f32[2,3]`; a symbolic one as its header writes it. */
static void spec_text(sbuf *b, const leaf *l) {
  if (l->symbolic) {
    sb_puts(b, l->spec);
    return;
  }
  sb_printf(b, "%s[", l->dtype->name);
  for (int i = 0; i < l->rank; i++) sb_printf(b, "%s%lld", i ? "," : "", (long long)l->dims[i]);
  sb_puts(b, "]");
}

/* --- the artifact ----------------------------------------------------------------------- */

typedef struct {
  char *name;
  const unsigned char *data;
  size_t size;
} section;

/* A held specialization of a symbolic program: its sizes, and its executable's section. */
typedef struct {
  char *text;    /* "b=2, t=8" */
  char *section; /* "executable.0" */
} specialization;

struct aotkit_artifact {
  uint32_t magic;
  char *label;
  unsigned char *bytes;
  size_t size;
  uint32_t version;
  jval header;
  char *name;
  leaf *ins, *outs;
  size_t nin, nout;
  aotkit_leaf *cins, *couts;
  section *sections;
  size_t nsections;
  char *signature;
  bool sharded;
  size_t npruned; /* inputs the executable takes no argument for (leaf.pruned) */
  char *symbolic; /* what its specializations are, for the refusal; NULL for static shapes */
  char **symbols;
  size_t nsymbols;
  specialization *specs;
  size_t nspecs;
  int64_t *values; /* nspecs * nsymbols sizes */
  long selected;   /* the specialization aotkit_artifact_select chose, or -1 */
};

typedef struct {
  const char *where;
  char *err;
  size_t errlen;
  bool failed;
} ctx;

static int bad_field(ctx *c, const char *field, const char *fmt, ...) {
  char detail[1400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(detail, sizeof detail, fmt, ap);
  va_end(ap);
  return fail(c->err, c->errlen, AOTKIT_USER_ERROR, "%s: header field '%s' %s; %s", c->where, field,
              detail, REWRITE);
}

/* Python's str.isidentifier for ASCII; beyond ASCII (which needs Unicode's XID tables) any
 * printable code point outside the punctuation blocks. */
static bool is_identifier(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    bool first = i == 0;
    uint32_t c = utf8_next(s, n, &i);
    bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_' ||
              (!first && c >= '0' && c <= '9') ||
              (c >= 0xaa && code_printable(c) && !(c >= 0x2000 && c <= 0x2bff) &&
               !(c >= 0x3000 && c <= 0x303f) && c != 0xd7 && c != 0xf7 && !(c >= 0xa1 && c <= 0xbf));
    if (!ok) return false;
  }
  return n > 0;
}

/* Walks an encoded pytree (aotkit/pytrees.py), naming each leaf by its path as jax's
 * keystr does. Returns NULL on success, else what is wrong; `names` may be NULL (count). */
typedef struct {
  char **names;
  size_t count, cap;
} leaves;

static void leaves_add(leaves *l, const char *name) {
  if (l->count == l->cap) {
    l->cap = l->cap ? 2 * l->cap : 8;
    char **names = realloc(l->names, l->cap * sizeof *names);
    if (names == NULL) abort();
    l->names = names;
  }
  l->names[l->count++] = strdup(name);
}

static const char *walk_tree(const jval *v, sbuf *path, leaves *out, int depth) {
  if (depth > MAX_TREE_DEPTH) return "nests deeper than 256 levels";
  if (v->t == J_STR && v->slen == 1 && v->s[0] == '*') {
    leaves_add(out, path->s ? path->s : "");
    return NULL;
  }
  if (v->t == J_NULL) return NULL;
  if (v->t != J_OBJ || v->n != 1) return "has a node that is not a pytree node";
  const char *kind = v->keys[0];
  const jval *body = &v->items[0];
  size_t mark = path->n;
  if (!strcmp(kind, "tuple") || !strcmp(kind, "list")) {
    if (body->t != J_ARR) return "has a tuple or list that is not a JSON list";
    for (size_t i = 0; i < body->n; i++) {
      sb_printf(path, "[%zu]", i);
      const char *e = walk_tree(&body->items[i], path, out, depth + 1);
      path->n = mark;
      if (path->s) path->s[mark] = 0;
      if (e) return e;
    }
    return NULL;
  }
  if (!strcmp(kind, "dict")) {
    if (body->t != J_ARR) return "has a dict that is not a list of [key, child] pairs";
    for (size_t i = 0; i < body->n; i++) {
      const jval *pair = &body->items[i];
      if (pair->t != J_ARR || pair->n != 2) return "has a dict entry that is not a [key, child] pair";
      const jval *key = &pair->items[0];
      if (!(key->t == J_STR || (key->t == J_NUM && key->is_int && !key->big)))
        return "has a dict key that is neither a string nor an integer";
      for (size_t k = 0; k < i; k++) {
        const jval *other = &body->items[k].items[0];
        if (other->t == key->t &&
            (key->t == J_STR ? other->slen == key->slen && !memcmp(other->s, key->s, key->slen)
                             : other->i == key->i))
          return "has a dict with a key twice";
      }
      if (key->t == J_STR) {
        if (!text_printable(key->s, key->slen)) return "has a dict key with " UNPRINTABLE;
        sb_puts(path, "[");
        sb_repr(path, key->s, key->slen);
        sb_puts(path, "]");
      } else {
        sb_printf(path, "[%lld]", (long long)key->i);
      }
      const char *e = walk_tree(&pair->items[1], path, out, depth + 1);
      path->n = mark;
      if (path->s) path->s[mark] = 0;
      if (e) return e;
    }
    return NULL;
  }
  if (!strcmp(kind, "namedtuple")) {
    if (body->t != J_ARR || body->n != 3 || body->items[0].t != J_STR ||
        body->items[1].t != J_ARR || body->items[2].t != J_ARR ||
        body->items[1].n != body->items[2].n)
      return "has a namedtuple that is not [name, [field, ...], [child, ...]]";
    if (!text_printable(body->items[0].s, body->items[0].slen))
      return "has a namedtuple name with " UNPRINTABLE;
    const jval *fields = &body->items[1];
    for (size_t i = 0; i < fields->n; i++) {
      const jval *f = &fields->items[i];
      if (f->t != J_STR || !is_identifier(f->s, f->slen) || f->s[0] == '_')
        return "has a namedtuple field that is no identifier not starting with '_'";
      for (size_t k = 0; k < i; k++)
        if (fields->items[k].slen == f->slen && !memcmp(fields->items[k].s, f->s, f->slen))
          return "has a namedtuple with a field twice";
    }
    for (size_t i = 0; i < fields->n; i++) {
      sb_printf(path, ".%s", fields->items[i].s);
      const char *e = walk_tree(&body->items[2].items[i], path, out, depth + 1);
      path->n = mark;
      if (path->s) path->s[mark] = 0;
      if (e) return e;
    }
    return NULL;
  }
  if (!strcmp(kind, "node")) {
    if (body->t != J_ARR || body->n != 3 || body->items[0].t != J_STR ||
        body->items[1].t != J_OBJ || body->items[1].n != 1 || body->items[2].t != J_ARR)
      return "has a node that is not [name, {form: aux}, [child, ...]]";
    if (!text_printable(body->items[0].s, body->items[0].slen))
      return "has a node type name with " UNPRINTABLE;
    const char *form = body->items[1].keys[0];
    if (strcmp(form, "bytes") && strcmp(form, "data") && strcmp(form, "fields"))
      return "has a node whose aux data is not bytes, data or fields";
    for (size_t i = 0; i < body->items[2].n; i++) {
      sb_printf(path, "[%zu]", i);
      const char *e = walk_tree(&body->items[2].items[i], path, out, depth + 1);
      path->n = mark;
      if (path->s) path->s[mark] = 0;
      if (e) return e;
    }
    return NULL;
  }
  return "has a node that is not a pytree node";
}

static void leaves_free(leaves *l) {
  for (size_t i = 0; i < l->count; i++) free(l->names[i]);
  free(l->names);
  memset(l, 0, sizeof *l);
}

/* The options' checks of artifacts.py's `option_fault`. */
static bool option_name_ok(const char *k, size_t n) {
  size_t i = 0;
  while (i < n && i < 2 && k[i] == '-') i++;
  if (i >= n || !((k[i] >= 'A' && k[i] <= 'Z') || (k[i] >= 'a' && k[i] <= 'z'))) return false;
  for (i++; i < n; i++) {
    char c = k[i];
    if (!((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' ||
          c == '.' || c == '-'))
      return false;
  }
  return true;
}

/* Whether the compile option `key` names a path or makes the compiler write files
 * (artifacts.py's `writes_files`): named for what it does, whatever its value; named for a
 * place (`..._to`, `..._path`, `..._filename`), only with a string value (`is_string`). */
static bool writes_files(const char *key, bool is_string) {
  char low[512];
  size_t n = strlen(key);
  if (n >= sizeof low) n = sizeof low - 1;
  for (size_t i = 0; i < n; i++) low[i] = (char)((key[i] >= 'A' && key[i] <= 'Z') ? key[i] + 32 : key[i]);
  low[n] = 0;
  static const char *const words[] = {"dump", "profil", "trace", "saver"};
  for (size_t i = 0; i < 4; i++)
    if (strstr(low, words[i])) return true;
  if (!is_string) return false;
  if (strstr(low, "filename")) return true;
  static const char *const parts[] = {"to", "from", "path", "dir", "file", "files", "directory",
                                      "prefix"};
  for (size_t i = 0; i < n; i++) {
    if (low[i] != '-' && low[i] != '_') continue;
    for (size_t k = 0; k < 8; k++) {
      size_t m = strlen(parts[k]);
      if (strncmp(low + i + 1, parts[k], m) == 0) {
        char after = low[i + 1 + m];
        if (after == 0 || after == '-' || after == '_') return true;
      }
    }
  }
  return false;
}

/* Whether `key` holds one of `words` as a whole `_`-separated part (backends/base.py's
 * `(^|_)(word)(_|$)` patterns). */
static bool has_word(const char *key, const char *const *words, size_t nwords) {
  size_t n = strlen(key);
  for (size_t w = 0; w < nwords; w++) {
    size_t m = strlen(words[w]);
    for (size_t i = 0; i + m <= n; i++) {
      if ((i == 0 || key[i - 1] == '_') && strncmp(key + i, words[w], m) == 0 &&
          (key[i + m] == 0 || key[i + m] == '_'))
        return true;
    }
  }
  return false;
}

/* backends/base.py's `_SIZE_WORDS` and `_COUNT_WORDS`, `MAX_COUNT`. */
static const char *const SIZE_WORDS[] = {"count", "counts", "size",  "sizes", "split",
                                         "threads", "num",  "bytes", "limit"};
static const char *const COUNT_WORDS[] = {"count", "counts", "split", "threads", "num"};
#define MAX_COUNT 4096

/* Whether an option's name asks the compiler to end the process on purpose ("crash" in any
 * case, as `option_danger`). */
static bool crashes_on_purpose(const char *key) {
  for (const char *p = key; *p; p++) {
    static const char word[] = "crash";
    size_t k = 0;
    while (k < 5 && p[k] && (p[k] | 0x20) == word[k]) k++;
    if (k == 5) return true;
  }
  return false;
}

static int check_header(aotkit_artifact *a, ctx *c) {
  const jval *h = &a->header;
  char *s = NULL;
  int rc;
  if (h->t != J_OBJ) {
    static const char *const kinds[] = {"NoneType", "bool", "float", "str", "list", "dict"};
    const char *kind = h->t == J_NUM && h->is_int ? "int" : kinds[h->t];
    return fail(c->err, c->errlen, AOTKIT_USER_ERROR, "%s: the header is %s JSON, not an object; %s",
                c->where, kind, REWRITE);
  }
  for (size_t i = 0; i < h->n; i++)
    if (!text_printable(h->keys[i], h->keylens[i])) {
      jval k = {.t = J_STR, .s = h->keys[i], .slen = h->keylens[i]};
      s = jshort(&k);
      rc = fail(c->err, c->errlen, AOTKIT_USER_ERROR, "%s: the header has a key %s, which holds %s; %s",
                c->where, s, UNPRINTABLE, REWRITE);
      free(s);
      return rc;
    }
#define FIELD(var, name, type, what)                                              \
  const jval *var = jget(h, name);                                                \
  if (var == NULL) return bad_field(c, name, "is missing");                       \
  if (var->t != type) {                                                           \
    s = jshort(var);                                                              \
    rc = bad_field(c, name, "is %s, not %s", s, what);                            \
    free(s);                                                                      \
    return rc;                                                                    \
  }
  {
    FIELD(f1, "aotkit", J_STR, "a string");
    FIELD(f2, "jaxlib", J_STR, "a string");
    FIELD(f3, "stablehlo", J_STR, "a string");
    FIELD(f4, "name", J_STR, "a string");
  }
  FIELD(target, "target", J_OBJ, "an object");
  for (size_t i = 0; i < target->n; i++)
    if (target->items[i].t != J_STR) return bad_field(c, "target", "must map strings to strings");
  const jval *backend = jget(target, "backend");
  if (backend == NULL || backend->t != J_STR) return bad_field(c, "target", "has no backend name");
  const jval *fmt = jget(h, "executable_format");
  if (fmt != NULL && fmt->t != J_NULL && fmt->t != J_STR) {
    s = jshort(fmt);
    rc = bad_field(c, "executable_format", "is %s, not a string or null", s);
    free(s);
    return rc;
  }
  bool has_fmt = fmt != NULL && fmt->t == J_STR;
  const jval *key = jget(h, "cache_key");
  if (key != NULL && key->t != J_NULL) {
    bool ok = key->t == J_STR && key->slen == 64;
    for (size_t i = 0; ok && i < 64; i++)
      ok = (key->s[i] >= '0' && key->s[i] <= '9') || (key->s[i] >= 'a' && key->s[i] <= 'f');
    if (!ok) {
      s = jshort(key);
      rc = bad_field(c, "cache_key", "is %s, not a cache key (64 hexadecimal digits)", s);
      free(s);
      return rc;
    }
  }
  const jval *aborts = jget(h, "aborts_on");
  if (aborts != NULL) {
    if (aborts->t != J_OBJ) {
      s = jshort(aborts);
      rc = bad_field(c, "aborts_on", "is %s, not an object", s);
      free(s);
      return rc;
    }
    for (size_t i = 0; i < aborts->n; i++)
      if (aborts->items[i].t != J_STR)
        return bad_field(c, "aborts_on", "must map strings to strings");
  }
  FIELD(options, "options", J_OBJ, "an object");
  for (size_t i = 0; i < options->n; i++) {
    const char *k = options->keys[i];
    const jval *v = &options->items[i];
    jval kv = {.t = J_STR, .s = options->keys[i], .slen = options->keylens[i]};
    s = jshort(&kv);
    sbuf krepr = {0};
    sb_repr(&krepr, k, options->keylens[i]);
    rc = 0;
    if (!option_name_ok(k, options->keylens[i]))
      rc = bad_field(c, "options",
                     "has an option named %s, which is not a compile option's name (an XLA or "
                     "iree-compile flag such as 'xla_cpu_enable_fast_math')",
                     s);
    else if (v->t != J_BOOL && v->t != J_NUM && v->t != J_STR) {
      char *vs = jshort(v);
      rc = bad_field(c, "options", "has %s = %s, not a bool, number or string", krepr.s, vs);
      free(vs);
    } else if (writes_files(k, v->t == J_STR))
      rc = bad_field(c, "options",
                     "has %s, an option that names a path or makes the compiler write files; a "
                     "file may carry only options that change what is compiled",
                     krepr.s);
    else if (v->t == J_NUM && v->is_int && v->big) {
      char *vs = jshort(v);
      rc = bad_field(c, "options", "has %s = %s, an int outside the 64-bit range options take",
                     krepr.s, vs);
      free(vs);
    } else if (v->t == J_NUM && v->is_int && v->i < 0 && has_word(k, SIZE_WORDS, 9))
      rc = bad_field(c, "options",
                     "has %s = %lld, a negative count or size, which XLA would read as a huge "
                     "unsigned size (aborting the process)",
                     krepr.s, (long long)v->i);
    else if (crashes_on_purpose(k))
      rc = bad_field(c, "options",
                     "has %s, an option that makes the compiler end the process on purpose",
                     krepr.s);
    else if (v->t == J_NUM && v->is_int && v->i > MAX_COUNT && has_word(k, COUNT_WORDS, 5))
      rc = bad_field(c, "options",
                     "has %s = %lld, a count above %d, which makes the compile run for minutes "
                     "with memory growing without bound",
                     krepr.s, (long long)v->i, MAX_COUNT);
    else if (v->t == J_STR && !text_printable(v->s, v->slen)) {
      char *vs = jshort(v);
      rc = bad_field(c, "options", "has %s = %s, which holds %s", krepr.s, vs, UNPRINTABLE);
      free(vs);
    }
    free(s);
    free(krepr.s);
    if (rc) return rc;
  }
  const jval *sym = jget(h, "symbolic");
  bool symbolic = sym != NULL && sym->t != J_NULL;
  if (symbolic) {
    const jval *cons = jget(sym, "constraints");
    if (sym->t != J_OBJ || sym->n != 3 || !jget(sym, "symbols") || !cons ||
        !jget(sym, "specializations")) {
      s = jshort(sym);
      rc = bad_field(c, "symbolic", "is %s, not an object of symbols, constraints, specializations",
                     s);
      free(s);
      return rc;
    }
  }
  for (int which = 0; which < 2; which++) {
    const char *name = which ? "out_specs" : "in_specs";
    FIELD(specs, name, J_ARR, "a list of specs");
    leaf *list = calloc(specs->n ? specs->n : 1, sizeof *list);
    if (list == NULL) abort();
    if (which) a->outs = list, a->nout = specs->n;
    else a->ins = list, a->nin = specs->n;
    for (size_t i = 0; i < specs->n; i++) {
      const jval *t = &specs->items[i];
      if (t->t != J_STR)
        return bad_field(c, name, "holds a bad spec (specs are strings such as 'f32[2,3]')");
      const char *e = t->slen ? parse_spec(t->s, t->slen, symbolic, &list[i]) : "an empty spec";
      if (e) return bad_field(c, name, "holds a bad spec (spec: cannot parse '%s': %s)", t->s, e);
      list[i].spec = strdup(t->s);
    }
  }
  FIELD(donated, "donated", J_ARR, "a list of booleans");
  bool all_bool = donated->n == a->nin;
  for (size_t i = 0; all_bool && i < donated->n; i++) all_bool = donated->items[i].t == J_BOOL;
  if (!all_bool) return bad_field(c, "donated", "must hold one boolean per input (%zu)", a->nin);
  for (size_t i = 0; i < a->nin; i++) a->ins[i].donated = donated->items[i].b;
  /* The leaves the executable and the portable module take no argument for (the unused
     arguments jax.jit prunes): input indices, increasing. */
  const jval *pruned = jget(h, "pruned");
  if (pruned != NULL && pruned->t != J_NULL) {
    bool ok = pruned->t == J_ARR;
    for (size_t i = 0; ok && i < pruned->n; i++) {
      const jval *v = &pruned->items[i];
      ok = v->t == J_NUM && v->is_int && !v->big;
    }
    if (!ok) {
      s = jshort(pruned);
      rc = bad_field(c, "pruned", "is %s, not a list of input indices", s);
      free(s);
      return rc;
    }
    for (size_t i = 0; ok && i < pruned->n; i++) {
      int64_t v = pruned->items[i].i;
      ok = v >= 0 && (uint64_t)v < a->nin && (i == 0 || pruned->items[i - 1].i < v);
      if (ok) a->ins[v].pruned = true;
    }
    if (!ok) {
      s = jshort(pruned);
      rc = bad_field(c, "pruned", "is %s; it lists input indices below %zu, each once, in order",
                     s, a->nin);
      free(s);
      return rc;
    }
    a->npruned = pruned->n;
    const jval *layout = jget(h, "partitioning");
    if (a->npruned && (symbolic || (layout != NULL && layout->t != J_NULL)))
      return bad_field(c, "pruned",
                       "is given for a sharded or symbolic program; aotkit writes neither");
  }
  FIELD(in_tree, "in_tree", J_OBJ, "a pytree");
  const jval *out_tree = jget(h, "out_tree");
  if (out_tree == NULL) return bad_field(c, "out_tree", "is missing");
  /* The argument tree: ((args...), {kwargs}); leaves named as the CLI names them. */
  leaves in = {0}, out = {0};
  sbuf path = {0};
  const char *e = walk_tree(in_tree, &path, &in, 0);
  if (e) {
    leaves_free(&in);
    free(path.s);
    return bad_field(c, "in_tree", "%s", e);
  }
  path.n = 0;
  if (path.s) path.s[0] = 0;
  sb_puts(&path, "out");
  e = walk_tree(out_tree, &path, &out, 0);
  free(path.s);
  if (e) {
    leaves_free(&in);
    leaves_free(&out);
    return bad_field(c, "out_tree", "%s", e);
  }
  const jval *pair = jget(in_tree, "tuple");
  const jval *args = NULL, *kwargs = NULL;
  if (pair != NULL && pair->t == J_ARR && pair->n == 2) {
    args = jget(&pair->items[0], "tuple");
    kwargs = jget(&pair->items[1], "dict");
  }
  if (args == NULL || kwargs == NULL || args->t != J_ARR || kwargs->t != J_ARR) {
    leaves_free(&in);
    leaves_free(&out);
    return bad_field(c, "in_tree",
                     "must be an (args tuple, kwargs dict) pair like "
                     "PyTreeDef(((*,), {}))");
  }
  if (in.count != a->nin || out.count != a->nout) {
    bool bad_in = in.count != a->nin;
    rc = bad_field(c, bad_in ? "in_tree" : "out_tree", "has %zu leaves but there are %zu specs",
                   bad_in ? in.count : out.count, bad_in ? a->nin : a->nout);
    leaves_free(&in);
    leaves_free(&out);
    return rc;
  }
  const jval *arg_names = jget(h, "arg_names");
  if (arg_names != NULL && arg_names->t != J_NULL) {
    bool ok = arg_names->t == J_ARR && arg_names->n == args->n;
    for (size_t i = 0; ok && i < arg_names->n; i++) {
      const jval *n = &arg_names->items[i];
      ok = n->t == J_NULL || (n->t == J_STR && is_identifier(n->s, n->slen));
    }
    if (!ok) {
      leaves_free(&in);
      leaves_free(&out);
      s = jshort(arg_names);
      rc = bad_field(c, "arg_names",
                     "is %s, not a list of %zu parameter names (identifiers or null)", s, args->n);
      free(s);
      return rc;
    }
  } else {
    arg_names = NULL;
  }
  /* "[0][1]['w']" -> "args[1]['w']" or "w['w']"; "[1]['scale']..." -> "scale..." */
  for (size_t i = 0; i < in.count; i++) {
    const char *p = in.names[i];
    sbuf name = {0};
    if (strncmp(p, "[0][", 4) == 0) {
      char *close;
      size_t pos = strtoul(p + 4, &close, 10);
      const char *rest = close + 1;
      if (arg_names != NULL && pos < arg_names->n && arg_names->items[pos].t == J_STR)
        sb_printf(&name, "%s%s", arg_names->items[pos].s, rest);
      else
        sb_printf(&name, "args[%zu]%s", pos, rest);
    } else if (strncmp(p, "[1][", 4) == 0) {
      /* a keyword: its key as it is (the dict key's repr stripped of quotes) */
      const char *q = p + 4;
      char quote = *q;
      const char *end = strchr(q + 1, quote);
      while (end && end[-1] == '\\') end = strchr(end + 1, quote);
      if (end && end[1] == ']') {
        sb_add(&name, q + 1, (size_t)(end - q - 1));
        sb_puts(&name, end + 2);
      } else {
        sb_puts(&name, p);
      }
    } else {
      sb_puts(&name, "args");
    }
    a->ins[i].name = sb_take(&name);
  }
  for (size_t i = 0; i < out.count; i++) a->outs[i].name = strdup(out.names[i]);
  leaves_free(&in);
  leaves_free(&out);
  FIELD(table, "sections", J_ARR, "a list");
  if (table->n > MAX_SECTIONS)
    return bad_field(c, "sections", "lists %zu sections (at most %d)", table->n, MAX_SECTIONS);
  bool has_portable = false, has_exec = false;
  for (size_t i = 0; i < table->n; i++) {
    const jval *ent = &table->items[i];
    const jval *nm = jget(ent, "name"), *sz = jget(ent, "size"), *sh = jget(ent, "sha256");
    if (!(nm && nm->t == J_STR && sz && sz->t == J_NUM && sz->is_int && (sz->big || sz->i >= 0) &&
          sh && sh->t == J_STR && sh->slen == 64)) {
      s = jshort(ent);
      rc = bad_field(c, "sections", "has an entry %s without name, size, sha256", s);
      free(s);
      return rc;
    }
    if (sz->big && sz->d < 0) {
      s = jshort(ent);
      rc = bad_field(c, "sections", "has an entry %s without name, size, sha256", s);
      free(s);
      return rc;
    }
    for (size_t k = 0; k < i; k++) {
      const jval *other = jget(&table->items[k], "name");
      if (other->slen == nm->slen && !memcmp(other->s, nm->s, nm->slen)) {
        sbuf r = {0};
        sb_repr(&r, nm->s, nm->slen);
        rc = bad_field(c, "sections", "lists section %s twice", r.s);
        free(r.s);
        return rc;
      }
    }
    has_portable |= !strcmp(nm->s, PORTABLE) && nm->slen == strlen(PORTABLE);
    has_exec |= !strcmp(nm->s, EXECUTABLE) && nm->slen == strlen(EXECUTABLE);
  }
  if (!has_portable)
    return bad_field(c, "sections", "has no 'stablehlo' section (the portable StableHLO)");
  if (has_fmt && !has_exec && !symbolic) {
    sbuf r = {0};
    sb_repr(&r, fmt->s, fmt->slen);
    rc = bad_field(c, "sections", "has no 'executable' section for executable_format %s", r.s);
    free(r.s);
    return rc;
  }
  const jval *layout = jget(h, "partitioning");
  if (layout != NULL && layout->t != J_NULL) {
    if (symbolic)
      return bad_field(c, "symbolic",
                       "is given for a sharded program; aotkit writes neither with both");
    a->sharded = true;
  }
  if (symbolic) {
    /* What it holds, for the refusal: "b=2, b=8" (aotkit-run compiles only static programs). */
    const jval *symbols = jget(sym, "symbols"), *specs = jget(sym, "specializations");
    sbuf held = {0};
    if (symbols && symbols->t == J_ARR && specs && specs->t == J_ARR) {
      a->symbols = calloc(symbols->n + 1, sizeof *a->symbols);
      a->specs = calloc(specs->n + 1, sizeof *a->specs);
      a->values = calloc(specs->n * symbols->n + 1, sizeof *a->values);
      if (a->symbols == NULL || a->specs == NULL || a->values == NULL) abort();
      for (size_t k = 0; k < symbols->n; k++)
        a->symbols[a->nsymbols++] = strdup(symbols->items[k].t == J_STR ? symbols->items[k].s : "?");
      for (size_t i = 0; i < specs->n; i++) {
        const jval *sizes = jget(&specs->items[i], "sizes");
        const jval *section = jget(&specs->items[i], "section");
        if (sizes == NULL || sizes->t != J_ARR || sizes->n != symbols->n || section == NULL ||
            section->t != J_STR)
          continue;
        sbuf text = {0};
        bool ok = true;
        for (size_t k = 0; k < sizes->n; k++) {
          const jval *sv = &sizes->items[k];
          ok &= sv->t == J_NUM && sv->is_int && !sv->big && sv->i >= 0;
          sb_printf(&text, "%s%s=%lld", k ? ", " : "", a->symbols[k], (long long)sv->i);
          a->values[a->nspecs * a->nsymbols + k] = sv->i;
        }
        if (!ok) {
          free(text.s);
          return bad_field(c, "symbolic", "has a specialization whose sizes are not sizes");
        }
        sb_printf(&held, "%s%s", held.n ? "; " : "", text.s);
        a->specs[a->nspecs].text = sb_take(&text);
        a->specs[a->nspecs].section = strdup(section->s);
        a->nspecs++;
      }
    }
    a->symbolic = held.n ? sb_take(&held) : strdup("none");
    free(held.s);
  }
  return 0;
#undef FIELD
}

static void build_signature(aotkit_artifact *a) {
  sbuf b = {0};
  sb_printf(&b, "%s(", a->name);
  for (size_t i = 0; i < a->nin; i++) {
    sb_printf(&b, "%s%s: ", i ? ", " : "", a->ins[i].name);
    spec_text(&b, &a->ins[i]);
  }
  sb_puts(&b, ") -> (");
  for (size_t i = 0; i < a->nout; i++) {
    sb_printf(&b, "%s%s: ", i ? ", " : "", a->outs[i].name);
    spec_text(&b, &a->outs[i]);
  }
  sb_puts(&b, ")");
  a->signature = sb_take(&b);
}

static void to_public(const leaf *l, aotkit_leaf *p) {
  p->name = l->name;
  p->dtype = l->dtype->name;
  p->itemsize = l->dtype->itemsize;
  p->rank = l->rank;
  p->dims = l->dims;
  p->nbytes = l->nbytes;
  p->donated = l->donated;
}

static void leaf_free(leaf *l) {
  free(l->name);
  free(l->dims);
  free(l->spec);
  for (int k = 0; l->dimtext != NULL && k < l->rank; k++) free(l->dimtext[k]);
  free(l->dimtext);
}

static void artifact_free(aotkit_artifact *a) {
  if (a == NULL) return;
  a->magic = 0;
  free(a->label);
  free(a->bytes);
  jfree(&a->header);
  for (size_t i = 0; i < a->nin; i++) leaf_free(&a->ins[i]);
  for (size_t i = 0; i < a->nout; i++) leaf_free(&a->outs[i]);
  for (size_t i = 0; i < a->nspecs; i++) free(a->specs[i].text), free(a->specs[i].section);
  free(a->specs);
  for (size_t i = 0; i < a->nsymbols; i++) free(a->symbols[i]);
  free(a->symbols);
  free(a->values);
  free(a->ins);
  free(a->outs);
  free(a->cins);
  free(a->couts);
  for (size_t i = 0; i < a->nsections; i++) free(a->sections[i].name);
  free(a->sections);
  free(a->signature);
  free(a->symbolic);
  free(a->name);
  free(a);
}

static uint32_t le32(const unsigned char *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Takes ownership of `bytes` (malloc'd). */
static int artifact_parse(unsigned char *bytes, size_t n, const char *label, aotkit_artifact **out,
                          char *err, size_t errlen) {
  aotkit_artifact *a = calloc(1, sizeof *a);
  if (a == NULL) abort();
  a->magic = MAGIC_ARTIFACT;
  a->selected = -1;
  a->label = strdup(label);
  a->bytes = bytes;
  a->size = n;
  ctx c = {a->label, err, errlen, false};
  int rc = AOTKIT_USER_ERROR;
  if (n == 0 || memcmp(bytes, MAGIC, n < 8 ? n : 8) != 0) {
    sbuf start = {0};
    sb_puts(&start, "b'");
    for (size_t i = 0; i < n && i < 8; i++) {
      unsigned char ch = bytes[i];
      if (ch == '\\' || ch == '\'') sb_printf(&start, "\\%c", ch);
      else if (ch == '\n') sb_puts(&start, "\\n");
      else if (ch == '\r') sb_puts(&start, "\\r");
      else if (ch == '\t') sb_puts(&start, "\\t");
      else if (ch >= 0x20 && ch < 0x7f) sb_add(&start, (const char *)&ch, 1);
      else sb_printf(&start, "\\x%02x", ch);
    }
    sb_puts(&start, "'");
    fail(err, errlen, rc,
         "%s is not an aotkit artifact (it starts with %s, not b'\\x89AOT\\r\\n\\x1a\\n'); pass "
         "a file written by Compiled.save or `aotkit compile -o F.aotx`",
         label, start.s);
    free(start.s);
    goto bad;
  }
  if (n < PREFIX_SIZE) {
    fail(err, errlen, rc, "%s is truncated: %zu bytes, shorter than the %u-byte prefix; %s", label,
         n, PREFIX_SIZE, REWRITE);
    goto bad;
  }
  uint32_t version = le32(bytes + 8), header_size = le32(bytes + 12);
  a->version = version;
  if (version < MIN_FORMAT_VERSION || version > FORMAT_VERSION) {
    if (version > FORMAT_VERSION)
      fail(err, errlen, rc,
           "%s has artifact format version %u, newer than this aotkit reads (%u); upgrade "
           "aotkit, or write the artifact with this version",
           label, version, FORMAT_VERSION);
    else
      fail(err, errlen, rc,
           "%s has artifact format version %u, which no aotkit wrote (this one reads %u to %u); %s",
           label, version, MIN_FORMAT_VERSION, FORMAT_VERSION, REWRITE);
    goto bad;
  }
  if (header_size > MAX_HEADER_BYTES) {
    fail(err, errlen, rc, "%s: header size %u exceeds %u bytes; %s", label, header_size,
         MAX_HEADER_BYTES, REWRITE);
    goto bad;
  }
  size_t body = PREFIX_SIZE + (size_t)header_size;
  if (n < body) {
    fail(err, errlen, rc, "%s is truncated: %zu bytes, but its header ends at byte %zu; %s", label,
         n, body, REWRITE);
    goto bad;
  }
  unsigned char digest[32];
  sha256(bytes + PREFIX_SIZE, header_size, digest);
  if (memcmp(digest, bytes + 16, 32) != 0) {
    fail(err, errlen, rc, "%s: the header is corrupted (its SHA-256 does not match); %s", label,
         REWRITE);
    goto bad;
  }
  size_t badpos;
  if (!utf8_valid(bytes + PREFIX_SIZE, header_size, &badpos)) {
    fail(err, errlen, rc,
         "%s: the header is not valid JSON ('utf-8' codec can't decode byte 0x%02x in position "
         "%zu); %s",
         label, bytes[PREFIX_SIZE + badpos], badpos, REWRITE);
    goto bad;
  }
  jparser j = {(const char *)bytes + PREFIX_SIZE, (const char *)bytes + body,
               (const char *)bytes + PREFIX_SIZE, {0}, 0};
  if (header_size >= 3 && memcmp(j.p, "\xef\xbb\xbf", 3) == 0) {
    fail(err, errlen, rc, "%s: the header is not valid JSON (Unexpected UTF-8 BOM); %s", label,
         REWRITE);
    goto bad;
  }
  bool ok = jvalue(&j, &a->header);
  if (ok) {
    jws(&j);
    if (j.p != j.end) ok = jerr(&j, "Extra data");
  }
  if (!ok) {
    fail(err, errlen, rc, "%s: the header is not valid JSON (%s); %s", label, j.msg, REWRITE);
    goto bad;
  }
  if ((rc = check_header(a, &c)) != 0) goto bad;
  rc = AOTKIT_USER_ERROR;
  const jval *table = jget(&a->header, "sections");
  /* sizes: a total past the file (or past 2**64) is truncation */
  uint64_t total = body;
  bool over = false;
  for (size_t i = 0; i < table->n; i++) {
    const jval *sz = jget(&table->items[i], "size");
    if (sz->big || (uint64_t)sz->i > UINT64_MAX - total) over = true;
    else total += (uint64_t)sz->i;
  }
  if (over || n < total) {
    if (over)
      fail(err, errlen, rc, "%s is truncated: %zu bytes, but its sections end past byte 2**64; %s",
           label, n, REWRITE);
    else
      fail(err, errlen, rc, "%s is truncated: %zu bytes, but its sections end at byte %llu; %s",
           label, n, (unsigned long long)total, REWRITE);
    goto bad;
  }
  if (n > total) {
    fail(err, errlen, rc,
         "%s has %llu bytes after its last section (it should end at byte %llu); %s", label,
         (unsigned long long)(n - total), (unsigned long long)total, REWRITE);
    goto bad;
  }
  a->sections = calloc(table->n ? table->n : 1, sizeof *a->sections);
  if (a->sections == NULL) abort();
  size_t offset = body;
  for (size_t i = 0; i < table->n; i++) {
    const jval *ent = &table->items[i];
    const jval *nm = jget(ent, "name"), *sz = jget(ent, "size"), *sh = jget(ent, "sha256");
    char hex[65];
    sha256_hex(bytes + offset, (size_t)sz->i, hex);
    if (memcmp(hex, sh->s, 64) != 0) {
      sbuf r = {0};
      sb_repr(&r, nm->s, nm->slen);
      fail(err, errlen, rc,
           "%s: section %s is corrupted (its SHA-256 does not match the header's); %s", label,
           r.s, REWRITE);
      free(r.s);
      goto bad;
    }
    a->sections[a->nsections].name = strndup(nm->s, nm->slen);
    a->sections[a->nsections].data = bytes + offset;
    a->sections[a->nsections].size = (size_t)sz->i;
    a->nsections++;
    offset += (size_t)sz->i;
  }
  const jval *name = jget(&a->header, "name");
  {
    /* shown escaped, as artifacts.py's `printable` shows it */
    bool plain = text_printable(name->s, name->slen);
    if (plain) {
      a->name = strndup(name->s, name->slen);
    } else {
      sbuf r = {0};
      sb_repr(&r, name->s, name->slen);
      r.s[r.n - 1] = 0;
      a->name = strdup(r.s + 1);
      free(r.s);
    }
  }
  a->cins = calloc(a->nin ? a->nin : 1, sizeof *a->cins);
  a->couts = calloc(a->nout ? a->nout : 1, sizeof *a->couts);
  if (a->cins == NULL || a->couts == NULL) abort();
  for (size_t i = 0; i < a->nin; i++) to_public(&a->ins[i], &a->cins[i]);
  for (size_t i = 0; i < a->nout; i++) to_public(&a->outs[i], &a->couts[i]);
  build_signature(a);
  *out = a;
  return AOTKIT_OK;
bad:
  artifact_free(a);
  return rc;
}

int aotkit_artifact_open_bytes(const void *data, size_t size, const char *label,
                               aotkit_artifact **out, char *err, size_t errlen) {
  if (out == NULL)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_artifact_open_bytes: out is NULL; pass the address of a handle");
  *out = NULL;
  if (data == NULL && size > 0)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_artifact_open_bytes: data is NULL; pass the artifact's bytes");
  unsigned char *copy = malloc(size ? size : 1);
  if (copy == NULL)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_artifact_open_bytes: cannot allocate %zu bytes; free memory", size);
  if (size) memcpy(copy, data, size);
  return artifact_parse(copy, size, label ? label : "<bytes>", out, err, errlen);
}

int aotkit_artifact_open(const char *path, aotkit_artifact **out, char *err, size_t errlen) {
  if (out == NULL)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_artifact_open: out is NULL; pass the address of a handle");
  *out = NULL;
  if (path == NULL)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_artifact_open: path is NULL; pass the path of an artifact file");
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    int e = errno;
    return fail(err, errlen, AOTKIT_USER_ERROR, "%s: %s; %s", path, strerror(e),
                e == ENOENT ? "pass the path of an artifact written by Compiled.save or `aotkit "
                              "compile ... -o FILE.aotx`"
                            : "pass the path of an artifact file");
  }
  struct stat st;
  if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
    fclose(f);
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "%s is not a regular file (a folder, device or pipe); pass the path of an "
                "artifact file",
                path);
  }
  if ((uint64_t)st.st_size > MAX_FILE_BYTES) {
    fclose(f);
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "%s is %lld bytes, over the 4 GiB an artifact may be; pass the path of an "
                "artifact file",
                path, (long long)st.st_size);
  }
  size_t n = (size_t)st.st_size;
  unsigned char *bytes = malloc(n ? n : 1);
  if (bytes == NULL) {
    fclose(f);
    return fail(err, errlen, AOTKIT_USER_ERROR, "%s: cannot allocate %zu bytes; free memory", path,
                n);
  }
  size_t got = n ? fread(bytes, 1, n, f) : 0;
  fclose(f);
  if (got != n) {
    free(bytes);
    return fail(err, errlen, AOTKIT_USER_ERROR, "%s: read %zu of %zu bytes; check the file", path,
                got, n);
  }
  return artifact_parse(bytes, n, path, out, err, errlen);
}

static bool is_artifact(const aotkit_artifact *a) { return a != NULL && a->magic == MAGIC_ARTIFACT; }

void aotkit_artifact_close(aotkit_artifact **artifact) {
  if (artifact == NULL || !is_artifact(*artifact)) return;
  artifact_free(*artifact);
  *artifact = NULL;
}

const char *aotkit_artifact_name(const aotkit_artifact *a) { return is_artifact(a) ? a->name : ""; }
size_t aotkit_artifact_num_inputs(const aotkit_artifact *a) { return is_artifact(a) ? a->nin : 0; }
size_t aotkit_artifact_num_outputs(const aotkit_artifact *a) { return is_artifact(a) ? a->nout : 0; }
const aotkit_leaf *aotkit_artifact_input(const aotkit_artifact *a, size_t i) {
  return is_artifact(a) && i < a->nin ? &a->cins[i] : NULL;
}
const aotkit_leaf *aotkit_artifact_output(const aotkit_artifact *a, size_t i) {
  return is_artifact(a) && i < a->nout ? &a->couts[i] : NULL;
}
const char *aotkit_artifact_signature(const aotkit_artifact *a) {
  return is_artifact(a) ? a->signature : "";
}
const char *aotkit_artifact_field(const aotkit_artifact *a, const char *key) {
  if (!is_artifact(a) || key == NULL) return NULL;
  const jval *v;
  const char *dot = strchr(key, '.');
  if (dot != NULL) { /* "target.platform": a field of an object field */
    char head[64];
    size_t n = (size_t)(dot - key);
    if (n >= sizeof head) return NULL;
    memcpy(head, key, n);
    head[n] = 0;
    v = jget(jget(&a->header, head), dot + 1);
  } else {
    v = jget(&a->header, key);
  }
  return v != NULL && v->t == J_STR ? v->s : NULL;
}


/* --- symbolic dimensions: evaluating `2*t+1`, `floordiv(t, 8)` for held sizes -------------- */

typedef struct {
  const char *p;
  const aotkit_artifact *a;
  const int64_t *values;
  bool ok;
} evaluator;

static int64_t floordiv64(int64_t x, int64_t y) {
  int64_t q = x / y;
  return (x % y != 0 && ((x < 0) != (y < 0))) ? q - 1 : q;
}
static int64_t floormod64(int64_t x, int64_t y) { return x - floordiv64(x, y) * y; }

static void ev_ws(evaluator *e) {
  while (*e->p == ' ') e->p++;
}
static int64_t ev_sum(evaluator *e);

static int64_t ev_atom(evaluator *e) {
  ev_ws(e);
  if (*e->p == '-') {
    e->p++;
    return -ev_atom(e);
  }
  if (*e->p == '(') {
    e->p++;
    int64_t v = ev_sum(e);
    ev_ws(e);
    if (*e->p != ')') e->ok = false;
    else e->p++;
    return v;
  }
  if (*e->p >= '0' && *e->p <= '9') {
    int64_t v = 0;
    while (*e->p >= '0' && *e->p <= '9') {
      if (v > (INT64_MAX - 9) / 10) e->ok = false;
      v = v * 10 + (*e->p++ - '0');
    }
    return v;
  }
  const char *start = e->p;
  while ((*e->p >= 'a' && *e->p <= 'z') || (*e->p >= 'A' && *e->p <= 'Z') || *e->p == '_' ||
         (e->p > start && *e->p >= '0' && *e->p <= '9'))
    e->p++;
  size_t n = (size_t)(e->p - start);
  if (n == 0) {
    e->ok = false;
    return 0;
  }
  ev_ws(e);
  if (*e->p == '(') {
    e->p++;
    int64_t x = ev_sum(e), y = 0;
    bool two = !(n == 12 && !strncmp(start, "non_negative", 12));
    ev_ws(e);
    if (two) {
      if (*e->p != ',') e->ok = false;
      else e->p++;
      y = ev_sum(e);
      ev_ws(e);
    }
    if (*e->p != ')') e->ok = false;
    else e->p++;
    if (!two) return x < 0 ? 0 : x;
    if (n == 3 && !strncmp(start, "max", 3)) return x > y ? x : y;
    if (n == 3 && !strncmp(start, "min", 3)) return x < y ? x : y;
    if (y == 0) {
      e->ok = false;
      return 0;
    }
    if (n == 8 && !strncmp(start, "floordiv", 8)) return floordiv64(x, y);
    if (n == 3 && !strncmp(start, "mod", 3)) return floormod64(x, y);
    e->ok = false;
    return 0;
  }
  for (size_t k = 0; k < e->a->nsymbols; k++)
    if (strlen(e->a->symbols[k]) == n && !strncmp(e->a->symbols[k], start, n)) return e->values[k];
  e->ok = false;
  return 0;
}

static int64_t ev_product(evaluator *e) {
  int64_t v = ev_atom(e);
  while (e->ok) {
    ev_ws(e);
    if (e->p[0] == '/' && e->p[1] == '/') {
      e->p += 2;
      int64_t y = ev_atom(e);
      if (y == 0) e->ok = false;
      else v = floordiv64(v, y);
    } else if (*e->p == '*') {
      e->p++;
      int64_t y = ev_atom(e);
      if (__builtin_mul_overflow(v, y, &v)) e->ok = false;
    } else if (*e->p == '%') {
      e->p++;
      int64_t y = ev_atom(e);
      if (y == 0) e->ok = false;
      else v = floormod64(v, y);
    } else {
      break;
    }
  }
  return v;
}

static int64_t ev_sum(evaluator *e) {
  int64_t v = ev_product(e);
  while (e->ok) {
    ev_ws(e);
    if (*e->p == '+' || *e->p == '-') {
      bool minus = *e->p++ == '-';
      int64_t y = ev_product(e);
      if (minus ? __builtin_sub_overflow(v, y, &v) : __builtin_add_overflow(v, y, &v))
        e->ok = false;
    } else {
      break;
    }
  }
  return v;
}

/* The size of a symbolic dimension for `values` (one per symbol); false if it does not
 * evaluate (a form this evaluator does not know) or is negative. */
static bool eval_dim(const aotkit_artifact *a, const char *text, const int64_t *values,
                     int64_t *out) {
  evaluator e = {text, a, values, true};
  int64_t v = ev_sum(&e);
  ev_ws(&e);
  if (!e.ok || *e.p != 0 || v < 0) return false;
  *out = v;
  return true;
}

size_t aotkit_artifact_num_specializations(const aotkit_artifact *a) {
  return is_artifact(a) ? a->nspecs : 0;
}

const char *aotkit_artifact_specialization(const aotkit_artifact *a, size_t i) {
  return is_artifact(a) && i < a->nspecs ? a->specs[i].text : NULL;
}

static bool concrete(aotkit_artifact *a, leaf *l, const int64_t *values, bool apply) {
  if (!l->symbolic) return true;
  int64_t dims[64];
  size_t total = l->dtype->itemsize;
  for (int k = 0; k < l->rank; k++) {
    if (l->dimtext[k] == NULL) {
      dims[k] = l->dims[k];
    } else if (!eval_dim(a, l->dimtext[k], values, &dims[k])) {
      return false;
    }
    if (dims[k] != 0 && total > SIZE_MAX / (size_t)dims[k]) return false;
    total *= (size_t)dims[k];
  }
  if (apply) {
    memcpy(l->dims, dims, sizeof(int64_t) * (size_t)l->rank);
    l->nbytes = total;
  }
  return true;
}

int aotkit_artifact_select(aotkit_artifact *a, size_t i, char *err, size_t errlen) {
  if (!is_artifact(a))
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_artifact_select: artifact is not an open aotkit_artifact; pass one from "
                "aotkit_artifact_open");
  if (i >= a->nspecs)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_artifact_select: %s holds %zu specialization(s), not %zu; pass an index "
                "below aotkit_artifact_num_specializations",
                a->signature, a->nspecs, i);
  const int64_t *values = a->values + i * a->nsymbols;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t k = 0; k < a->nin + a->nout; k++) {
      leaf *l = k < a->nin ? &a->ins[k] : &a->outs[k - a->nin];
      if (!concrete(a, l, values, pass == 1))
        return fail(err, errlen, AOTKIT_USER_ERROR,
                    "%s: %s: the dimensions of %s do not evaluate for %s; run it with aotkit.load "
                    "in Python",
                    a->label, a->signature, l->name, a->specs[i].text);
    }
  }
  for (size_t k = 0; k < a->nin; k++) to_public(&a->ins[k], &a->cins[k]);
  for (size_t k = 0; k < a->nout; k++) to_public(&a->outs[k], &a->couts[k]);
  a->selected = (long)i;
  return AOTKIT_OK;
}

static const section *find_section(const aotkit_artifact *a, const char *name) {
  for (size_t i = 0; i < a->nsections; i++)
    if (!strcmp(a->sections[i].name, name)) return &a->sections[i];
  return NULL;
}

/* --- PJRT ----------------------------------------------------------------------------------- */

struct aotkit_runtime {
  uint32_t magic;
  void *lib;
  const PJRT_Api *api;
  PJRT_Client *client;
  PJRT_Device *device;
  char *path, *platform, *platform_version;
  int shlo_min[3], shlo_max[3];
  bool has_window;
  char window[64];
};

struct aotkit_program {
  uint32_t magic;
  aotkit_runtime *runtime;
  const aotkit_artifact *artifact;
  PJRT_LoadedExecutable *exe;
  char *how;
  long selected; /* the specialization it was compiled for (-1: static shapes) */
};

/* The plugin's message for `e` (destroyed); "" for NULL. */
static void pjrt_message(const PJRT_Api *api, PJRT_Error *e, char *buf, size_t n) {
  buf[0] = 0;
  if (e == NULL) return;
  PJRT_Error_Message_Args m = {.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE, .error = e};
  api->PJRT_Error_Message(&m);
  snprintf(buf, n, "%.*s", (int)(m.message_size > 1200 ? 1200 : m.message_size), m.message);
  PJRT_Error_Destroy_Args d = {.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE, .error = e};
  api->PJRT_Error_Destroy(&d);
}

static int pjrt_fail(const PJRT_Api *api, PJRT_Error *e, char *err, size_t errlen,
                     const char *where, const char *fix) {
  char msg[1300];
  pjrt_message(api, e, msg, sizeof msg);
  for (char *p = msg; *p; p++)
    if (*p == '\n') *p = ' ';
  return fail(err, errlen, AOTKIT_RUNTIME_ERROR, "%s: %s; %s", where, msg, fix);
}

static bool await_event(const PJRT_Api *api, PJRT_Event *ev, char *msg, size_t n) {
  msg[0] = 0;
  if (ev == NULL) return true;
  PJRT_Event_Await_Args w = {.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE, .event = ev};
  PJRT_Error *e = api->PJRT_Event_Await(&w);
  PJRT_Event_Destroy_Args d = {.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE, .event = ev};
  api->PJRT_Event_Destroy(&d);
  if (e != NULL) {
    pjrt_message(api, e, msg, n);
    return false;
  }
  return true;
}

#ifndef AOTKIT_DEFAULT_CPU_PLUGIN
#define AOTKIT_DEFAULT_CPU_PLUGIN ""
#endif
#ifndef AOTKIT_DEFAULT_TPU_PLUGIN
#define AOTKIT_DEFAULT_TPU_PLUGIN ""
#endif
#ifndef AOTKIT_DEFAULT_CUDA_PLUGIN
#define AOTKIT_DEFAULT_CUDA_PLUGIN ""
#endif

static void parse_version(const PJRT_NamedValue *v, int out[3]) {
  out[0] = out[1] = out[2] = 0;
  if (v->type == PJRT_NamedValue_kInt64List)
    for (size_t i = 0; i < v->value_size && i < 3; i++) out[i] = (int)v->int64_array_value[i];
}

static int version_cmp(const int a[3], const int b[3]) {
  for (int i = 0; i < 3; i++)
    if (a[i] != b[i]) return a[i] < b[i] ? -1 : 1;
  return 0;
}

static bool parse_version_text(const char *s, int out[3]) {
  return s != NULL && sscanf(s, "%d.%d.%d", &out[0], &out[1], &out[2]) == 3;
}

static bool api_has(const PJRT_Api *api, size_t offset) { return api->struct_size > offset; }
#define HAS(api, fn) api_has(api, offsetof(PJRT_Api, fn))

int aotkit_runtime_open(const char *plugin, const char *platform, aotkit_runtime **out, char *err,
                        size_t errlen) {
  if (out == NULL)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_runtime_open: out is NULL; pass the address of a handle");
  *out = NULL;
  if (platform == NULL) platform = "cpu";
  const char *candidates[4] = {0};
  int nc = 0;
  const char *env = getenv("AOTKIT_PJRT_PLUGIN");
  if (plugin != NULL) {
    candidates[nc++] = plugin;
  } else if (env != NULL && env[0]) {
    candidates[nc++] = env;
  } else if (!strcmp(platform, "cpu")) {
    if (AOTKIT_DEFAULT_CPU_PLUGIN[0]) candidates[nc++] = AOTKIT_DEFAULT_CPU_PLUGIN;
    candidates[nc++] = "xla_cpu_pjrt.so";
  } else if (!strcmp(platform, "tpu")) {
    const char *tpu = getenv("TPU_LIBRARY_PATH");
    if (tpu != NULL && tpu[0]) candidates[nc++] = tpu;
    if (AOTKIT_DEFAULT_TPU_PLUGIN[0]) candidates[nc++] = AOTKIT_DEFAULT_TPU_PLUGIN;
    candidates[nc++] = "libtpu.so";
  } else if (!strcmp(platform, "cuda")) {
    if (AOTKIT_DEFAULT_CUDA_PLUGIN[0]) candidates[nc++] = AOTKIT_DEFAULT_CUDA_PLUGIN;
    candidates[nc++] = "xla_cuda_plugin.so";
  } else {
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "--platform: unknown platform '%s'; give cpu, tpu or cuda, or a plugin with "
                "--plugin PATH",
                platform);
  }
  void *lib = NULL;
  const char *path = NULL;
  sbuf tried = {0};
  for (int i = 0; i < nc && lib == NULL; i++) {
    lib = dlopen(candidates[i], RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
      const char *e = dlerror();
      sb_printf(&tried, "%s%s (%s)", tried.n ? ", " : "", candidates[i], e ? e : "not found");
    } else {
      path = candidates[i];
    }
  }
  if (lib == NULL) {
    int rc = fail(err, errlen, AOTKIT_USER_ERROR,
                  "plugin: no PJRT plugin for platform '%s' loads: tried %s; install one (`pip "
                  "install xla-cpu-pjrt` for the CPU) or give its path with --plugin PATH or "
                  "AOTKIT_PJRT_PLUGIN",
                  platform, tried.s);
    free(tried.s);
    return rc;
  }
  free(tried.s);
  const PJRT_Api *(*get)(void) = (const PJRT_Api *(*)(void))dlsym(lib, "GetPjrtApi");
  if (get == NULL) {
    dlclose(lib);
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "plugin: %s has no GetPjrtApi symbol, so it is no PJRT plugin; give a PJRT "
                "plugin's path",
                path);
  }
  const PJRT_Api *api = get();
  if (api == NULL || api->pjrt_api_version.major_version != PJRT_API_MAJOR ||
      !HAS(api, PJRT_Client_Compile) || !HAS(api, PJRT_Buffer_ToHostBuffer) ||
      !HAS(api, PJRT_Plugin_Attributes)) {
    int major = api ? api->pjrt_api_version.major_version : -1;
    int minor = api ? api->pjrt_api_version.minor_version : -1;
    dlclose(lib);
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "plugin: %s has PJRT C API %d.%d, which this runner (built for %d.%d) cannot "
                "call; use a plugin with API %d.x",
                path, major, minor, PJRT_API_MAJOR, PJRT_API_MINOR, PJRT_API_MAJOR);
  }
  aotkit_runtime *r = calloc(1, sizeof *r);
  if (r == NULL) abort();
  r->magic = MAGIC_RUNTIME;
  r->lib = lib;
  r->api = api;
  r->path = strdup(path);
  char msg[1300];
  PJRT_Plugin_Initialize_Args ia = {.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE};
  PJRT_Error *e = api->PJRT_Plugin_Initialize(&ia);
  if (e != NULL) {
    pjrt_message(api, e, msg, sizeof msg);
    int rc = fail(err, errlen, AOTKIT_RUNTIME_ERROR,
                  "plugin: %s does not initialize: %s; check its installation", path, msg);
    aotkit_runtime_close(&r);
    return rc;
  }
  PJRT_Plugin_Attributes_Args aa = {.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE};
  e = api->PJRT_Plugin_Attributes(&aa);
  if (e == NULL) {
    bool lo = false, hi = false;
    for (size_t i = 0; i < aa.num_attributes; i++) {
      const PJRT_NamedValue *v = &aa.attributes[i];
      if (v->name_size == 25 && !memcmp(v->name, "stablehlo_current_version", 25))
        parse_version(v, r->shlo_max), hi = true;
      if (v->name_size == 25 && !memcmp(v->name, "stablehlo_minimum_version", 25))
        parse_version(v, r->shlo_min), lo = true;
    }
    r->has_window = lo && hi;
    if (r->has_window)
      snprintf(r->window, sizeof r->window, "%d.%d.%d to %d.%d.%d", r->shlo_min[0], r->shlo_min[1],
               r->shlo_min[2], r->shlo_max[0], r->shlo_max[1], r->shlo_max[2]);
  } else {
    pjrt_message(api, e, msg, sizeof msg);
  }
  PJRT_Client_Create_Args ca = {.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE};
  e = api->PJRT_Client_Create(&ca);
  if (e != NULL) {
    pjrt_message(api, e, msg, sizeof msg);
    int rc = fail(err, errlen, AOTKIT_RUNTIME_ERROR,
                  "plugin: %s cannot create its client: %s; check that its device is present "
                  "and free",
                  path, msg);
    aotkit_runtime_close(&r);
    return rc;
  }
  r->client = ca.client;
  PJRT_Client_PlatformName_Args pn = {.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE,
                                      .client = r->client};
  e = api->PJRT_Client_PlatformName(&pn);
  r->platform = e ? strdup("?") : strndup(pn.platform_name, pn.platform_name_size);
  if (e) pjrt_message(api, e, msg, sizeof msg);
  PJRT_Client_PlatformVersion_Args pv = {
      .struct_size = PJRT_Client_PlatformVersion_Args_STRUCT_SIZE, .client = r->client};
  e = api->PJRT_Client_PlatformVersion(&pv);
  r->platform_version = e ? strdup("?") : strndup(pv.platform_version, pv.platform_version_size);
  if (e) pjrt_message(api, e, msg, sizeof msg);
  PJRT_Client_AddressableDevices_Args ad = {
      .struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE, .client = r->client};
  e = api->PJRT_Client_AddressableDevices(&ad);
  if (e != NULL || ad.num_addressable_devices == 0) {
    if (e) pjrt_message(api, e, msg, sizeof msg);
    int rc = fail(err, errlen, AOTKIT_RUNTIME_ERROR,
                  "plugin: %s has no addressable device%s%s; check that its device is present",
                  path, e ? ": " : "", e ? msg : "");
    aotkit_runtime_close(&r);
    return rc;
  }
  r->device = ad.addressable_devices[0];
  *out = r;
  return AOTKIT_OK;
}

static bool is_runtime(const aotkit_runtime *r) { return r != NULL && r->magic == MAGIC_RUNTIME; }

void aotkit_runtime_close(aotkit_runtime **runtime) {
  if (runtime == NULL || !is_runtime(*runtime)) return;
  aotkit_runtime *r = *runtime;
  r->magic = 0;
  if (r->client != NULL) {
    PJRT_Client_Destroy_Args d = {.struct_size = PJRT_Client_Destroy_Args_STRUCT_SIZE,
                                  .client = r->client};
    PJRT_Error *e = r->api->PJRT_Client_Destroy(&d);
    char msg[64];
    pjrt_message(r->api, e, msg, sizeof msg);
  }
  /* The plugin stays loaded: plugins keep threads and atexit handlers that outlive
     dlclose. */
  free(r->path);
  free(r->platform);
  free(r->platform_version);
  free(r);
  *runtime = NULL;
}

const char *aotkit_runtime_platform(const aotkit_runtime *r) {
  return is_runtime(r) ? r->platform : "";
}
const char *aotkit_runtime_plugin_path(const aotkit_runtime *r) {
  return is_runtime(r) ? r->path : "";
}
const char *aotkit_runtime_stablehlo_window(const aotkit_runtime *r) {
  return is_runtime(r) && r->has_window ? r->window : "";
}

/* Protobuf: a varint, a length-delimited field. */
static void pb_varint(sbuf *b, uint64_t v) {
  unsigned char out[10];
  size_t n = 0;
  do {
    out[n] = (unsigned char)(v & 0x7f);
    v >>= 7;
    if (v) out[n] |= 0x80;
    n++;
  } while (v);
  sb_add(b, (const char *)out, n);
}
static void pb_bytes(sbuf *b, unsigned field, const char *data, size_t n) {
  pb_varint(b, (uint64_t)field << 3 | 2);
  pb_varint(b, n);
  sb_add(b, data, n);
}

/* The serialized xla.CompileOptionsProto for one device: executable_build_options (3) with
 * device_ordinal (1) = -1, num_replicas (4) = 1, num_partitions (5) = 1 (empty options
 * make XLA abort), and the artifact's compile options as env_option_overrides (7: map from
 * name to OptionOverrideProto {string_field 1, bool_field 2, int_field 3, double_field 4}),
 * as jaxlib passes `compiler_options`. */
static char *compile_options(const aotkit_artifact *a, size_t *size) {
  sbuf out = {0}, build = {0};
  pb_varint(&build, 1 << 3 | 0);
  pb_varint(&build, (uint64_t)-1);
  pb_varint(&build, 4 << 3 | 0);
  pb_varint(&build, 1);
  pb_varint(&build, 5 << 3 | 0);
  pb_varint(&build, 1);
  pb_bytes(&out, 3, build.s, build.n);
  const jval *options = jget(&a->header, "options");
  for (size_t i = 0; options != NULL && i < options->n; i++) {
    const jval *v = &options->items[i];
    sbuf value = {0}, entry = {0};
    if (v->t == J_STR) {
      pb_bytes(&value, 1, v->s, v->slen);
    } else if (v->t == J_BOOL) {
      pb_varint(&value, 2 << 3 | 0);
      pb_varint(&value, v->b);
    } else if (v->is_int) {
      pb_varint(&value, 3 << 3 | 0);
      pb_varint(&value, (uint64_t)v->i);
    } else {
      pb_varint(&value, 4 << 3 | 1);
      sb_add(&value, (const char *)&v->d, 8); /* little-endian hosts: aotkit is Linux x86/arm */
    }
    pb_bytes(&entry, 1, options->keys[i], options->keylens[i]);
    pb_bytes(&entry, 2, value.s ? value.s : "", value.n);
    pb_bytes(&out, 7, entry.s, entry.n);
    free(value.s);
    free(entry.s);
  }
  free(build.s);
  *size = out.n;
  return sb_take(&out);
}

/* The newest static module of the selected specialization (`stablehlo@VERSION/SECTION`,
 * aotkit/native/portable.py) within the plugin's StableHLO window, else the newest; NULL if
 * there is none. */
static const section *static_copy(const aotkit_artifact *a, const aotkit_runtime *r) {
  const char *wanted = a->specs[a->selected].section;
  const section *found = NULL, *fitting = NULL;
  int best[3] = {-1, -1, -1}, best_fit[3] = {-1, -1, -1};
  for (size_t i = 0; i < a->nsections; i++) {
    const char *name = a->sections[i].name;
    if (strncmp(name, PORTABLE_AT, strlen(PORTABLE_AT)) != 0) continue;
    const char *slash = strchr(name, '/');
    if (slash == NULL || strcmp(slash + 1, wanted) != 0) continue;
    int v[3];
    char tail;
    if (sscanf(name + strlen(PORTABLE_AT), "%d.%d.%d%c", &v[0], &v[1], &v[2], &tail) != 4 ||
        tail != '/')
      continue;
    if (version_cmp(v, best) > 0) memcpy(best, v, sizeof best), found = &a->sections[i];
    if (r != NULL && r->has_window && version_cmp(v, r->shlo_min) >= 0 &&
        version_cmp(v, r->shlo_max) <= 0 && version_cmp(v, best_fit) > 0)
      memcpy(best_fit, v, sizeof best_fit), fitting = &a->sections[i];
  }
  return fitting != NULL ? fitting : found;
}

int aotkit_artifact_runnable(const aotkit_artifact *artifact, char *err, size_t errlen) {
  if (!is_artifact(artifact))
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_artifact_runnable: artifact is not an open aotkit_artifact; pass one from "
                "aotkit_artifact_open");
  const aotkit_artifact *a = artifact;
  if (a->sharded)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "%s: %s is a sharded program (its header has a partitioning); aotkit-run runs "
                "programs of one device: run it with aotkit.load in Python, or save a "
                "one-device version",
                a->label, a->signature);
  if (a->symbolic != NULL && a->selected < 0)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "%s: %s has symbolic shapes (specializations held: %s); choose one with "
                "aotkit_artifact_select",
                a->label, a->signature, a->symbolic);
  if (a->symbolic != NULL && static_copy(a, NULL) == NULL)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "%s: %s has symbolic shapes, and no static module of its specialization %s "
                "(aotkit-run compiles a portable module, which is symbolic here, and cannot load "
                "jaxlib's executables): add them with `python -m aotkit.native portable %s`",
                a->label, a->signature, a->specs[a->selected].text, a->label);
  return AOTKIT_OK;
}

/* jaxlib's PJRT C API client reports a plugin's platform version with "PJRT C API\n" put in
   front (measured: libtpu's "TFRT TPU v5 lite\nBuilt on ..." reads "PJRT C API\nTFRT TPU
   v5 lite\nBuilt on ..." in jaxlib 0.10.2); the plugin itself reports it without. */
static const char C_API_PREFIX[] = "PJRT C API\n";

static bool same_platform_version(const char *artifact, const char *plugin) {
  size_t n = sizeof C_API_PREFIX - 1;
  if (!strcmp(artifact, plugin)) return true;
  return !strncmp(artifact, C_API_PREFIX, n) && !strcmp(artifact + n, plugin);
}

/* A protobuf varint at data[*at] (below end): its value, *at moved past it; false where the
   bytes end first or it is longer than 10 bytes. */
static bool read_varint(const unsigned char *data, size_t end, size_t *at, uint64_t *value) {
  uint64_t v = 0;
  for (int shift = 0; shift < 70 && *at < end; shift += 7) {
    unsigned char c = data[(*at)++];
    v |= (uint64_t)(c & 0x7f) << shift;
    if (!(c & 0x80)) {
      *value = v;
      return true;
    }
  }
  return false;
}

/* jaxlib writes an executable of a PJRT C API plugin wrapped by IFRT: a length-prefixed
   record naming "pjrt_ifrt" (with the program's layouts), then what the plugin's
   PJRT_Executable_Serialize wrote. Where `data` has that form (its first record names
   "pjrt_ifrt"), gives the bytes after that record (what the CPU plugin and libtpu load);
   false where it has not. */
static bool ifrt_unwrap(const unsigned char *data, size_t size, const unsigned char **inner,
                        size_t *size_out) {
  size_t at = 0;
  uint64_t first;
  static const char tag[] = "\x12\x09pjrt_ifrt"; /* field 2, a 9-byte string */
  if (!read_varint(data, size, &at, &first) || first > size - at) return false;
  bool named = false;
  for (size_t i = at; i + sizeof tag - 1 <= at + first; i++)
    if (!memcmp(data + i, tag, sizeof tag - 1)) {
      named = true;
      break;
    }
  if (!named) return false;
  at += (size_t)first;
  if (at >= size) return false;
  *inner = data + at;
  *size_out = size - at;
  return true;
}

int aotkit_program_load(aotkit_runtime *runtime, const aotkit_artifact *artifact,
                        aotkit_program **out, char *err, size_t errlen) {
  if (out == NULL)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_program_load: out is NULL; pass the address of a handle");
  *out = NULL;
  if (!is_runtime(runtime))
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_program_load: runtime is not an open aotkit_runtime; pass one from "
                "aotkit_runtime_open");
  if (!is_artifact(artifact))
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_program_load: artifact is not an open aotkit_artifact; pass one from "
                "aotkit_artifact_open");
  const aotkit_artifact *a = artifact;
  int refused = aotkit_artifact_runnable(a, err, errlen);
  if (refused) return refused;
  const PJRT_Api *api = runtime->api;
  sbuf how = {0};
  char msg[1300];
  PJRT_LoadedExecutable *exe = NULL;
  /* The executable: only where the plugin is what compiled it. */
  const char *fmt = aotkit_artifact_field(a, "executable_format");
  const char *platform = aotkit_artifact_field(a, "target.platform");
  const char *pversion = aotkit_artifact_field(a, "target.platform_version");
  const char *runtime_name = aotkit_artifact_field(a, "target.runtime");
  const section *exec = find_section(a, EXECUTABLE);
  if (a->symbolic != NULL) {
    sb_printf(&how, "it runs specialization %s of a symbolic program (section '%s' holds jaxlib's "
              "executable of it)",
              a->specs[a->selected].text, a->specs[a->selected].section);
  } else if (exec == NULL || fmt == NULL) {
    sb_puts(&how, "the artifact has no executable section");
  } else if (strcmp(fmt, "pjrt") != 0) {
    sb_printf(&how, "its executable is %s, not a PJRT executable", fmt);
  } else if (platform == NULL || strcmp(platform, runtime->platform) != 0) {
    sb_printf(&how, "its executable is for platform '%s', the plugin's is '%s'",
              platform ? platform : "?", runtime->platform);
  } else if (!strcmp(platform, "cpu") && runtime_name != NULL &&
             !strncmp(runtime_name, "jaxlib", 6) &&
             (pversion == NULL || strncmp(pversion, C_API_PREFIX, sizeof C_API_PREFIX - 1))) {
    /* jaxlib's own CPU client; one of a plugin (aotkit.backends.load_plugin) reports its
       version with the C API's prefix */
    sb_printf(&how,
              "its executable was compiled by %s's own CPU client, another XLA build than the "
              "plugin",
              runtime_name);
  } else if (pversion == NULL || !same_platform_version(pversion, runtime->platform_version)) {
    sbuf r1 = {0}, r2 = {0};
    sb_repr(&r1, pversion ? pversion : "?", pversion ? strlen(pversion) : 1);
    sb_repr(&r2, runtime->platform_version, strlen(runtime->platform_version));
    sb_printf(&how, "its executable is for platform version %s, the plugin's is %s", r1.s, r2.s);
    free(r1.s);
    free(r2.s);
  } else if (!HAS(api, PJRT_Executable_DeserializeAndLoad)) {
    sb_puts(&how, "the plugin cannot load executables");
  } else {
    PJRT_Executable_DeserializeAndLoad_Args d = {
        .struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE,
        .client = runtime->client,
        .serialized_executable = (const char *)exec->data,
        .serialized_executable_size = exec->size};
    const unsigned char *inner;
    size_t inner_size;
    bool wrapped = false;
    if (ifrt_unwrap(exec->data, exec->size, &inner, &inner_size)) {
      PJRT_Executable_DeserializeAndLoad_Args t = d;
      t.serialized_executable = (const char *)inner;
      t.serialized_executable_size = inner_size;
      PJRT_Error *te = api->PJRT_Executable_DeserializeAndLoad(&t);
      if (te == NULL) {
        d = t;
        wrapped = true;
      } else {
        PJRT_Error_Destroy_Args de = {.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE,
                                      .error = te};
        api->PJRT_Error_Destroy(&de);
      }
    }
    PJRT_Error *e = wrapped ? NULL : api->PJRT_Executable_DeserializeAndLoad(&d);
    if (e == NULL) {
      exe = d.loaded_executable;
      sb_printf(&how, "loaded the executable section%s (platform '%s')",
                wrapped ? ", unwrapped from jaxlib's IFRT record," : " as it is", platform);
    } else {
      pjrt_message(api, e, msg, sizeof msg);
      for (char *p = msg; *p; p++)
        if (*p == '\n') *p = ' ';
      sb_printf(&how, "the plugin did not load its executable (%s)", msg);
    }
  }
  if (exe == NULL) {
    /* What the plugin's compiler would end the process on (`aborts_on`, written by aotkit:
       XLA:TPU on complex128 converts, aotkit/backends/tpu_complex128.py) is refused first. */
    char key[96];
    snprintf(key, sizeof key, "aborts_on.%s", runtime->platform);
    const char *aborts = aotkit_artifact_field(a, key);
    if (aborts != NULL) {
      sbuf what = {0};
      sb_repr(&what, aborts, strlen(aborts));
      int rc = fail(err, errlen, AOTKIT_USER_ERROR,
                    "%s: the plugin (platform '%s') would compile its portable StableHLO, since "
                    "%s, but the module holds %s, on which that platform's compiler ends the "
                    "process; save the artifact from a '%s' backend (its portable module is "
                    "written for it), or run it with aotkit.load in Python",
                    a->label, runtime->platform, how.s ? how.s : "?",
                    what.s ? what.s : "?", runtime->platform);
      free(what.s);
      free(how.s);
      return rc;
    }
    /* The portable module: `stablehlo` where the plugin reads its version (or does not
       say which it reads), else the newest older copy (`stablehlo@VERSION` sections,
       aotkit/native/portable.py) within the plugin's window, else `stablehlo` all the same
       (measured: xla-cpu-pjrt 0.0.1, StableHLO 0.9.0 to 1.13.3, compiles jaxlib 0.10.2's
       1.17.0 modules of common ops); if that fails, both versions are named. */
    const char *written = aotkit_artifact_field(a, "stablehlo");
    const section *module = find_section(a, PORTABLE);
    int v[3];
    bool newer = runtime->has_window && parse_version_text(written, v) &&
                 version_cmp(v, runtime->shlo_max) > 0;
    char best_text[64];
    snprintf(best_text, sizeof best_text, "%s", written ? written : "?");
    if (a->symbolic != NULL) {
      module = static_copy(a, runtime);
      const char *at = module->name + strlen(PORTABLE_AT);
      snprintf(best_text, sizeof best_text, "%.*s", (int)(strchr(at, '/') - at), at);
      newer = runtime->has_window && parse_version_text(best_text, v) &&
              version_cmp(v, runtime->shlo_max) > 0;
    } else if (newer || (runtime->has_window && parse_version_text(written, v) &&
                  version_cmp(v, runtime->shlo_min) < 0)) {
      int best[3] = {-1, -1, -1};
      for (size_t i = 0; i < a->nsections; i++) {
        const char *name = a->sections[i].name;
        if (strncmp(name, PORTABLE_AT, strlen(PORTABLE_AT)) != 0) continue;
        int c[3];
        char tail;
        if (sscanf(name + strlen(PORTABLE_AT), "%d.%d.%d%c", &c[0], &c[1], &c[2], &tail) != 3)
          continue;
        if (version_cmp(c, runtime->shlo_min) >= 0 && version_cmp(c, runtime->shlo_max) <= 0 &&
            version_cmp(c, best) > 0) {
          memcpy(best, c, sizeof best);
          module = &a->sections[i];
          snprintf(best_text, sizeof best_text, "%s", name + strlen(PORTABLE_AT));
          newer = false;
        }
      }
    }
    size_t opts_size;
    char *opts = compile_options(a, &opts_size);
    PJRT_Program program = {.struct_size = PJRT_Program_STRUCT_SIZE,
                            .code = (char *)module->data,
                            .code_size = module->size,
                            .format = "mlir",
                            .format_size = 4};
    PJRT_Client_Compile_Args cc = {.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE,
                                   .client = runtime->client,
                                   .program = &program,
                                   .compile_options = opts,
                                   .compile_options_size = opts_size};
    PJRT_Error *e = api->PJRT_Client_Compile(&cc);
    free(opts);
    if (e != NULL) {
      char where[800];
      if (newer)
        snprintf(where, sizeof where,
                 "%s: the plugin %s did not compile its portable StableHLO (version %s; the "
                 "plugin reads StableHLO %s)",
                 a->label, runtime->path, best_text, runtime->window);
      else
        snprintf(where, sizeof where,
                 "%s: the plugin %s did not compile its portable StableHLO (version %s)",
                 a->label, runtime->path, best_text);
      int rc = pjrt_fail(api, e, err, errlen, where,
                         newer ? "where the version is the cause, use a newer plugin; or run it "
                                 "with aotkit.load in Python"
                               : "run it with aotkit.load in Python, or report the plugin's error");
      free(how.s);
      return rc;
    }
    exe = cc.executable;
    sbuf line = {0};
    sb_printf(&line, "compiled the portable StableHLO (section '%s', version %s%s%s%s) with %s, "
              "since %s",
              module->name, best_text, runtime->has_window ? "; the plugin reads " : "",
              runtime->has_window ? runtime->window : "",
              newer ? ", older: compiled all the same" : "", runtime->path, how.s);
    free(how.s);
    how = line;
  }
  /* The program's outputs must be the artifact's. */
  PJRT_LoadedExecutable_GetExecutable_Args ge = {
      .struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE,
      .loaded_executable = exe};
  PJRT_Error *e = api->PJRT_LoadedExecutable_GetExecutable(&ge);
  if (e == NULL) {
    PJRT_Executable_NumOutputs_Args no = {.struct_size = PJRT_Executable_NumOutputs_Args_STRUCT_SIZE,
                                          .executable = ge.executable};
    e = api->PJRT_Executable_NumOutputs(&no);
    size_t nout = no.num_outputs;
    PJRT_Executable_Destroy_Args ed = {.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE,
                                       .executable = ge.executable};
    api->PJRT_Executable_Destroy(&ed);
    if (e == NULL && nout != a->nout) {
      PJRT_LoadedExecutable_Destroy_Args d = {
          .struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE, .executable = exe};
      api->PJRT_LoadedExecutable_Destroy(&d);
      free(how.s);
      return fail(err, errlen, AOTKIT_USER_ERROR,
                  "%s: its program has %zu results, its header %zu; %s", a->label, nout, a->nout,
                  REWRITE);
    }
  }
  if (e != NULL) pjrt_message(api, e, msg, sizeof msg);
  aotkit_program *p = calloc(1, sizeof *p);
  if (p == NULL) abort();
  p->magic = MAGIC_PROGRAM;
  p->runtime = runtime;
  p->artifact = a;
  p->exe = exe;
  p->selected = a->selected;
  p->how = sb_take(&how);
  *out = p;
  return AOTKIT_OK;
}

static bool is_program(const aotkit_program *p) { return p != NULL && p->magic == MAGIC_PROGRAM; }

void aotkit_program_free(aotkit_program **program) {
  if (program == NULL || !is_program(*program)) return;
  aotkit_program *p = *program;
  p->magic = 0;
  if (is_runtime(p->runtime) && p->exe != NULL) {
    PJRT_LoadedExecutable_Destroy_Args d = {
        .struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE, .executable = p->exe};
    PJRT_Error *e = p->runtime->api->PJRT_LoadedExecutable_Destroy(&d);
    char msg[64];
    pjrt_message(p->runtime->api, e, msg, sizeof msg);
  }
  free(p->how);
  free(p);
  *program = NULL;
}

const char *aotkit_program_how(const aotkit_program *p) { return is_program(p) ? p->how : ""; }

static void destroy_buffers(const PJRT_Api *api, PJRT_Buffer **bufs, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (bufs[i] != NULL) {
      PJRT_Buffer_Destroy_Args d = {.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE,
                                    .buffer = bufs[i]};
      PJRT_Error *e = api->PJRT_Buffer_Destroy(&d);
      char msg[64];
      pjrt_message(api, e, msg, sizeof msg);
      bufs[i] = NULL;
    }
}

int aotkit_program_call(aotkit_program *program, const void *const *inputs, size_t num_inputs,
                        void *const *outputs, size_t num_outputs, char *err, size_t errlen) {
  if (!is_program(program))
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_program_call: program is not a loaded aotkit_program; pass one from "
                "aotkit_program_load");
  aotkit_program *p = program;
  if (!is_runtime(p->runtime) || !is_artifact(p->artifact))
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_program_call: its runtime or artifact was closed; keep both open while "
                "the program is used");
  const aotkit_artifact *a = p->artifact;
  const PJRT_Api *api = p->runtime->api;
  if (a->selected != p->selected)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_program_call: the artifact's selected specialization changed since the "
                "program was loaded; load a program for each specialization");
  if (num_inputs != a->nin || num_outputs != a->nout)
    return fail(err, errlen, AOTKIT_USER_ERROR,
                "aotkit_program_call: %s takes %zu inputs and gives %zu outputs, got %zu and %zu; "
                "pass one buffer per leaf",
                a->signature, a->nin, a->nout, num_inputs, num_outputs);
  for (size_t i = 0; i < a->nin; i++)
    if (inputs == NULL || (inputs[i] == NULL && a->ins[i].nbytes > 0))
      return fail(err, errlen, AOTKIT_USER_ERROR,
                  "aotkit_program_call: input %zu (%s) is NULL; pass its %zu bytes", i,
                  a->ins[i].name, a->ins[i].nbytes);
  for (size_t i = 0; i < a->nout; i++)
    if (outputs == NULL || (outputs[i] == NULL && a->outs[i].nbytes > 0))
      return fail(err, errlen, AOTKIT_USER_ERROR,
                  "aotkit_program_call: output %zu (%s) is NULL; pass room for its %zu bytes", i,
                  a->outs[i].name, a->outs[i].nbytes);
  int rc = AOTKIT_OK;
  char msg[1300];
  PJRT_Buffer **in = calloc(a->nin + 1, sizeof *in);
  PJRT_Buffer **outb = calloc(a->nout + 1, sizeof *outb);
  if (in == NULL || outb == NULL) abort();
  static const char zero[16] = {0};
  size_t nargs = 0; /* the executable's arguments: the inputs less the pruned ones */
  for (size_t i = 0; i < a->nin; i++) {
    const leaf *l = &a->ins[i];
    if (l->pruned) continue;
    PJRT_Client_BufferFromHostBuffer_Args b = {
        .struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE,
        .client = p->runtime->client,
        .data = l->nbytes ? inputs[i] : zero,
        .type = l->dtype->pjrt,
        .dims = l->dims,
        .num_dims = (size_t)l->rank,
        .host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableOnlyDuringCall,
        .device = p->runtime->device};
    PJRT_Error *e = api->PJRT_Client_BufferFromHostBuffer(&b);
    if (e != NULL) {
      char where[300];
      snprintf(where, sizeof where, "%s: input %s: the plugin did not take it", a->label, l->name);
      rc = pjrt_fail(api, e, err, errlen, where, "check the plugin supports its dtype");
      goto done;
    }
    in[nargs++] = b.buffer;
    if (!await_event(api, b.done_with_host_buffer, msg, sizeof msg)) {
      rc = fail(err, errlen, AOTKIT_RUNTIME_ERROR, "%s: input %s: transfer failed: %s; retry",
                a->label, l->name, msg);
      goto done;
    }
  }
  {
    PJRT_ExecuteOptions options = {.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE};
    PJRT_Buffer *const *arg_lists[1] = {in};
    PJRT_Buffer **out_lists[1] = {outb};
    PJRT_Event *done[1] = {NULL};
    PJRT_LoadedExecutable_Execute_Args x = {
        .struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE,
        .executable = p->exe,
        .options = &options,
        .argument_lists = arg_lists,
        .num_devices = 1,
        .num_args = nargs,
        .output_lists = out_lists,
        .device_complete_events = done};
    PJRT_Error *e = api->PJRT_LoadedExecutable_Execute(&x);
    if (e != NULL) {
      char where[300];
      snprintf(where, sizeof where, "%s: the plugin did not run it", a->label);
      rc = pjrt_fail(api, e, err, errlen, where, "check the inputs and the plugin");
      goto done;
    }
    if (!await_event(api, done[0], msg, sizeof msg)) {
      rc = fail(err, errlen, AOTKIT_RUNTIME_ERROR, "%s: the run failed: %s; check the inputs",
                a->label, msg);
      goto done;
    }
  }
  for (size_t i = 0; i < a->nout; i++) {
    const leaf *l = &a->outs[i];
    PJRT_Buffer_ElementType_Args et = {.struct_size = PJRT_Buffer_ElementType_Args_STRUCT_SIZE,
                                       .buffer = outb[i]};
    PJRT_Buffer_Dimensions_Args dm = {.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE,
                                      .buffer = outb[i]};
    PJRT_Error *e = api->PJRT_Buffer_ElementType(&et);
    if (e == NULL) e = api->PJRT_Buffer_Dimensions(&dm);
    if (e != NULL) {
      char where[300];
      snprintf(where, sizeof where, "%s: result %s", a->label, l->name);
      rc = pjrt_fail(api, e, err, errlen, where, "report the plugin's error");
      goto done;
    }
    bool same = et.type == l->dtype->pjrt && dm.num_dims == (size_t)l->rank;
    for (int k = 0; same && k < l->rank; k++) same = dm.dims[k] == l->dims[k];
    if (!same) {
      rc = fail(err, errlen, AOTKIT_USER_ERROR,
                "%s: result %s of the program is not the header's spec; %s", a->label, l->name,
                REWRITE);
      goto done;
    }
    if (l->nbytes == 0) continue;
    /* Row-major on the host, whatever layout the device chose: without a host layout PJRT
       copies the device's, and a TPU executable can give a result column-major (measured:
       an f32[64,16] matmul result of jaxlib 0.10.2 on a v5e, minor_to_major {0,1}). */
    int64_t minor_to_major[64]; /* a spec has at most 64 dimensions (parse_spec) */
    for (int k = 0; k < l->rank; k++) minor_to_major[k] = l->rank - 1 - k;
    PJRT_Buffer_MemoryLayout host = {
        .struct_size = PJRT_Buffer_MemoryLayout_STRUCT_SIZE,
        .tiled = {.struct_size = PJRT_Buffer_MemoryLayout_Tiled_STRUCT_SIZE,
                  .minor_to_major = minor_to_major,
                  .minor_to_major_size = (size_t)l->rank},
        .type = PJRT_Buffer_MemoryLayout_Type_Tiled};
    PJRT_Buffer_ToHostBuffer_Args th = {.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE,
                                        .src = outb[i],
                                        .host_layout = l->rank > 1 ? &host : NULL};
    e = api->PJRT_Buffer_ToHostBuffer(&th); /* dst NULL: asks the size */
    if (e == NULL && th.dst_size != l->nbytes) {
      rc = fail(err, errlen, AOTKIT_RUNTIME_ERROR,
                "%s: result %s is %zu bytes on the device, not %zu; report this", a->label,
                l->name, th.dst_size, l->nbytes);
      goto done;
    }
    if (e == NULL) {
      th.dst = outputs[i];
      th.dst_size = l->nbytes;
      e = api->PJRT_Buffer_ToHostBuffer(&th);
    }
    if (e != NULL) {
      char where[300];
      snprintf(where, sizeof where, "%s: result %s: the copy to the host failed", a->label, l->name);
      rc = pjrt_fail(api, e, err, errlen, where, "retry");
      goto done;
    }
    if (!await_event(api, th.event, msg, sizeof msg)) {
      rc = fail(err, errlen, AOTKIT_RUNTIME_ERROR, "%s: result %s: the copy failed: %s; retry",
                a->label, l->name, msg);
      goto done;
    }
  }
done:
  destroy_buffers(api, in, a->nin);
  destroy_buffers(api, outb, a->nout);
  free(in);
  free(outb);
  return rc;
}
