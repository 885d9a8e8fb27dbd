/* Reads one flight through the C library and releases each batch, with no Arrow library on
 * top: what the C boundary alone costs (bench/languages.sh). languages_read URL KEYFILE TICKET TIMES */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "wirespeed.h"

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  if (argc != 5) return 2;
  WsError error = {0};
  WsOption options[] = {{"key_file", argv[2]}};
  WsClient* client = NULL;
  if (ws_client_connect(argv[1], options, 1, &client, &error) != WS_STATUS_OK) {
    fprintf(stderr, "connect: %s\n", error.message);
    return 1;
  }
  for (int i = 0; i < atoi(argv[4]); i++) {
    double start = now();
    struct ArrowArrayStream stream;
    if (ws_client_do_get(client, (const uint8_t*)argv[3], strlen(argv[3]), NULL, &stream, &error) != WS_STATUS_OK) {
      fprintf(stderr, "do_get: %s\n", error.message);
      return 1;
    }
    long rows = 0;
    struct ArrowArray batch;
    while (stream.get_next(&stream, &batch) == 0 && batch.release) {
      rows += batch.length;
      batch.release(&batch);
    }
    printf("plane %s rows %ld seconds %.6f\n", ws_stream_plane(&stream), rows, now() - start);
    stream.release(&stream);
  }
  ws_client_release(client, &error);
  return 0;
}
