/* A producer and a reader of one-column int64 batches over the Arrow C data and stream
 * interfaces, written by hand as a C program without an Arrow library would: what the tests
 * upload, serve from callbacks and check. */
#ifndef ARROW_INT64_H
#define ARROW_INT64_H

#include <stdlib.h>
#include <string.h>

#include "wirespeed.h"

/* ---- schema: struct<NAME: int64> ---- */

static void release_schema(struct ArrowSchema* s) {
  for (int64_t i = 0; i < s->n_children; i++) {
    struct ArrowSchema* child = s->children[i];
    if (child->release) child->release(child);
    free(child);
  }
  free(s->children);
  free((void*)s->name);
  s->release = NULL;
}

static void release_child_schema(struct ArrowSchema* s) {
  free((void*)s->name);
  s->release = NULL;
}

static void make_schema(struct ArrowSchema* out, const char* column) {
  struct ArrowSchema* child = calloc(1, sizeof *child);
  child->format = "l";
  child->name = strdup(column);
  child->flags = ARROW_FLAG_NULLABLE;
  child->release = release_child_schema;
  memset(out, 0, sizeof *out);
  out->format = "+s";
  out->name = strdup("");
  out->n_children = 1;
  out->children = malloc(sizeof(struct ArrowSchema*));
  out->children[0] = child;
  out->release = release_schema;
}

/* ---- array: struct of one int64 child ---- */

static void release_child_array(struct ArrowArray* a) {
  free((void*)a->buffers[1]);
  free(a->buffers);
  a->release = NULL;
}

static void release_array(struct ArrowArray* a) {
  struct ArrowArray* child = a->children[0];
  if (child->release) child->release(child);
  free(child);
  free(a->children);
  free(a->buffers);
  a->release = NULL;
}

/* `rows` values first, first + 1, ... */
static void make_array(struct ArrowArray* out, int64_t first, int64_t rows) {
  int64_t* values = malloc((size_t)(rows ? rows : 1) * sizeof(int64_t));
  for (int64_t i = 0; i < rows; i++) values[i] = first + i;
  struct ArrowArray* child = calloc(1, sizeof *child);
  child->length = rows;
  child->n_buffers = 2;
  child->buffers = calloc(2, sizeof(void*));
  child->buffers[1] = values;
  child->release = release_child_array;
  memset(out, 0, sizeof *out);
  out->length = rows;
  out->n_buffers = 1;
  out->buffers = calloc(1, sizeof(void*));
  out->n_children = 1;
  out->children = malloc(sizeof(struct ArrowArray*));
  out->children[0] = child;
  out->release = release_array;
}

/* ---- stream: `batches` batches of `rows` counting up from 0; fails at batch `fail_at`, or
 * from batch `malformed_at` on claims more rows than its column has ---- */

struct Counting {
  const char* column;
  int64_t batches, rows, next, fail_at, malformed_at;
};

static int counting_schema(struct ArrowArrayStream* s, struct ArrowSchema* out) {
  make_schema(out, ((struct Counting*)s->private_data)->column);
  return 0;
}

static int counting_next(struct ArrowArrayStream* s, struct ArrowArray* out) {
  struct Counting* c = s->private_data;
  if (c->next == c->fail_at) return 5; /* EIO */
  if (c->next == c->batches) {
    out->release = NULL; /* the end */
    return 0;
  }
  make_array(out, c->next * c->rows, c->rows);
  if (c->next >= c->malformed_at) out->length = c->rows * 2;
  c->next++;
  return 0;
}

static const char* counting_error(struct ArrowArrayStream* s) {
  (void)s;
  return "the producer failed on purpose";
}

static void counting_release(struct ArrowArrayStream* s) {
  free(s->private_data);
  s->release = NULL;
}

static void counting_stream(struct ArrowArrayStream* out, const char* column, int64_t batches, int64_t rows,
                            int64_t fail_at) {
  struct Counting* c = malloc(sizeof *c);
  *c = (struct Counting){column, batches, rows, 0, fail_at, INT64_MAX};
  *out = (struct ArrowArrayStream){counting_schema, counting_next, counting_error, counting_release, c};
}

/* The sum of column 0 of a struct<int64> batch. */
static int64_t sum_batch(const struct ArrowArray* batch) {
  const struct ArrowArray* column = batch->children[0];
  const int64_t* values = column->buffers[1];
  int64_t sum = 0;
  for (int64_t i = 0; i < column->length; i++) sum += values[column->offset + batch->offset + i];
  return sum;
}

#endif
