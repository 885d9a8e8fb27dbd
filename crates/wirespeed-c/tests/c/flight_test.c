/* The C library as a C program uses it, run under AddressSanitizer by tests/c_library.rs.
 *
 *   flight_test DIR ROWS KEYFILE   every check below, against a server this program starts on
 *                                  DIR, which holds numbers.arrow (ROWS int64s "x" from 0)
 *   flight_test --get URL TICKET KEYFILE
 *                                  reads one batch, says "reading", waits for a line on stdin
 *                                  (the caller kills the server), then reads on and says how
 *                                  the stream ended
 *   flight_test --exchange URL KEYFILE
 *                                  exchanges batches with `wirespeed bench flight-server`,
 *                                  which echoes them
 *   flight_test --tls DIR CERTS KEYFILE
 *                                  serves DIR (numbers.arrow) over mutual TLS with a password
 *                                  (CERTS holds ca.pem, server.pem, server.key, client.pem,
 *                                  client.key and password), and reads it as clients with and
 *                                  without what it asks for
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arrow_int64.h"
#include "wirespeed.h"

#define CHECK(cond, ...)                                       \
  do {                                                         \
    if (!(cond)) {                                             \
      fprintf(stderr, "FAILED %s:%d: ", __FILE__, __LINE__);  \
      fprintf(stderr, __VA_ARGS__);                            \
      fprintf(stderr, "\n");                                   \
      exit(1);                                                 \
    }                                                          \
  } while (0)

static WsError error;

/* A call that must succeed. */
#define OK(call)                                                                          \
  do {                                                                                    \
    WsStatus status_ = (call);                                                            \
    CHECK(status_ == WS_STATUS_OK, "%s: status %d: %s", #call, status_,                   \
          error.message ? error.message : "(no message)");                               \
  } while (0)

/* A call that must fail with status `want` and a message. */
#define FAILS(want, call)                                                                      \
  do {                                                                                         \
    WsStatus status_ = (call);                                                                 \
    CHECK(status_ == (want), "%s: status %d, expected %d (%s)", #call, status_, (want),        \
          error.message ? error.message : "");                                                \
    CHECK(error.code == (int32_t)(want) && error.message && error.message[0], "%s: no message", #call); \
    printf("ok %s -> %s\n", #call, error.message);                                            \
  } while (0)

/* A FlightDescriptor of one path element, as protobuf: type PATH (1), path = name. */
static size_t path_descriptor(const char* name, uint8_t* out) {
  size_t n = strlen(name);
  out[0] = 0x08, out[1] = 0x01, out[2] = 0x1a, out[3] = (uint8_t)n;
  memcpy(out + 4, name, n);
  return n + 4;
}

/* The URL a server of ours listens on, under `scheme` ("grpc", "grpc+tls"). */
static void url_of(WsServer* server, const char* scheme, const char* host, char* url, size_t len) {
  uint16_t port = 0;
  OK(ws_server_port(server, &port, &error));
  snprintf(url, len, "%s://%s:%u", scheme, host, port);
}

static WsClient* connect_with(const char* url, const char* keyfile, const char* transport) {
  WsOption options[] = {{"key_file", keyfile}, {"transport", transport}};
  WsClient* client = NULL;
  OK(ws_client_connect(url, options, keyfile ? 2 : 0, &client, &error));
  return client;
}

/* Reads `stream` to its end and releases it; returns the sum of its column. */
static int64_t sum_stream(struct ArrowArrayStream* stream) {
  int64_t sum = 0;
  for (;;) {
    struct ArrowArray batch;
    int rc = stream->get_next(stream, &batch);
    CHECK(rc == 0, "get_next: %d %s", rc, stream->get_last_error(stream));
    if (!batch.release) break;
    sum += sum_batch(&batch);
    batch.release(&batch);
  }
  stream->release(stream);
  return sum;
}

/* Reads `ticket` whole; returns the sum of its column, and the plane through `plane`. */
static int64_t read_sum(WsClient* client, const char* ticket, char* plane) {
  struct ArrowArrayStream stream;
  OK(ws_client_do_get(client, (const uint8_t*)ticket, strlen(ticket), NULL, &stream, &error));
  if (plane) strcpy(plane, ws_stream_plane(&stream));
  return sum_stream(&stream);
}

struct Canceller {
  WsCancel* token;
};

static void* cancel_now(void* arg) {
  WsError e = {0};
  ws_cancel_trigger(((struct Canceller*)arg)->token, &e);
  return NULL;
}

/* ---- a server of callbacks ---- */

static int32_t serve_counting(void* user_data, const uint8_t* ticket, size_t len, struct ArrowArrayStream* out,
                              WsError* e) {
  (void)user_data;
  if (len == 4 && memcmp(ticket, "fail", 4) == 0) {
    static char message[] = "no such numbers";
    e->message = message; /* static: no release needed */
    return WS_STATUS_NOT_FOUND;
  }
  counting_stream(out, "n", 10, 1000, -1);
  return WS_STATUS_OK;
}

static int64_t put_sum;

static int32_t take_upload(void* user_data, const uint8_t* d, size_t len, struct ArrowArrayStream* in, WsError* e) {
  (void)user_data, (void)d, (void)len, (void)e;
  int64_t sum = 0;
  for (;;) {
    struct ArrowArray batch;
    if (in->get_next(in, &batch) != 0) {
      in->release(in);
      return WS_STATUS_INVALID_ARGUMENT;
    }
    if (!batch.release) break;
    sum += sum_batch(&batch);
    batch.release(&batch);
  }
  in->release(in);
  __atomic_store_n(&put_sum, sum, __ATOMIC_SEQ_CST);
  return WS_STATUS_OK;
}

static int released_user_data;

static void release_user_data(void* user_data) { *(int*)user_data = 1; }

static void callback_server(const char* keyfile) {
  WsHandler handler = {.user_data = &released_user_data,
                       .do_get = serve_counting,
                       .do_put = take_upload,
                       .release = release_user_data};
  WsOption options[] = {{"key_file", keyfile}};
  WsServer* server = NULL;
  OK(ws_server_serve_callbacks(&handler, "127.0.0.1:0", options, 1, &server, &error));
  char url[64];
  url_of(server, "grpc", "127.0.0.1", url, sizeof url);

  WsClient* shm = connect_with(url, keyfile, "shm");
  WsClient* grpc = connect_with(url, NULL, "grpc");
  char plane[16];
  int64_t want = 10 * 1000 * (10 * 1000 - 1) / 2;
  CHECK(read_sum(shm, "any", plane) == want && strcmp(plane, "shm") == 0, "callback do_get over %s", plane);
  CHECK(read_sum(grpc, "any", plane) == want && strcmp(plane, "grpc") == 0, "callback do_get over grpc");
  printf("ok a server of callbacks serves over shm and grpc\n");

  struct ArrowArrayStream stream;
  FAILS(WS_STATUS_NOT_FOUND, ws_client_do_get(shm, (const uint8_t*)"fail", 4, NULL, &stream, &error));
  CHECK(strstr(error.message, "no such numbers"), "the callback's message: %s", error.message);

  uint8_t d[64];
  size_t dlen = path_descriptor("up", d);
  struct ArrowArrayStream upload;
  WsBuffers results;
  counting_stream(&upload, "n", 4, 500, -1);
  OK(ws_client_do_put(shm, d, dlen, &upload, NULL, &results, &error));
  results.release(&results);
  CHECK(__atomic_load_n(&put_sum, __ATOMIC_SEQ_CST) == 2000 * 1999 / 2, "the callback saw %ld",
        (long)put_sum);
  printf("ok a DoPut callback reads the upload as a stream\n");

  FAILS(WS_STATUS_UNIMPLEMENTED, ws_client_get_flight_info(shm, d, dlen, &(WsBuffer){0}, &error));
  OK(ws_client_release(shm, &error));
  OK(ws_client_release(grpc, &error));
  OK(ws_server_shutdown(server, 0, NULL, &error));
  CHECK(released_user_data == 1, "the handler's release ran");
}

static int everything(const char* dir, long rows, const char* keyfile) {
  CHECK(ws_version() && strlen(ws_version()) > 0, "a version");
  WsOption options[] = {{"key_file", keyfile}};
  WsServer* server = NULL;
  OK(ws_server_serve_directory(dir, "127.0.0.1:0", options, 1, &server, &error));
  char url[64];
  url_of(server, "grpc", "127.0.0.1", url, sizeof url);

  WsClient* shm = connect_with(url, keyfile, "shm");
  WsClient* grpc = connect_with(url, NULL, "grpc");
  WsClient* any = connect_with(url, keyfile, "auto");

  /* Metadata: ListFlights, GetFlightInfo, GetSchema. */
  WsBuffers infos;
  OK(ws_client_list_flights(grpc, NULL, 0, &infos, &error));
  CHECK(infos.count == 1 && infos.lens[0] > 0, "one flight listed, not %zu", infos.count);
  infos.release(&infos);
  CHECK(infos.release == NULL, "released");
  uint8_t d[64];
  size_t dlen = path_descriptor("numbers.arrow", d);
  WsBuffer info;
  OK(ws_client_get_flight_info(shm, d, dlen, &info, &error));
  CHECK(info.len > 0 && memmem(info.data, info.len, "numbers.arrow", 13), "a FlightInfo naming the flight");
  info.release(&info);
  struct ArrowSchema schema;
  OK(ws_client_get_schema(any, d, dlen, &schema, &error));
  CHECK(strcmp(schema.format, "+s") == 0 && schema.n_children == 1 && strcmp(schema.children[0]->name, "x") == 0 &&
            strcmp(schema.children[0]->format, "l") == 0,
        "schema struct<x: int64>");
  schema.release(&schema);
  printf("ok list_flights, get_flight_info, get_schema\n");

  /* DoGet over shm, the fastest plane and gRPC: the same sums. */
  char plane[16];
  int64_t want = (int64_t)rows * (rows - 1) / 2;
  CHECK(read_sum(shm, "numbers.arrow", plane) == want && strcmp(plane, "shm") == 0, "shm: %s", plane);
  CHECK(read_sum(any, "numbers.arrow", plane) == want && strcmp(plane, "shm") == 0, "auto: %s", plane);
  CHECK(read_sum(grpc, "numbers.arrow", plane) == want && strcmp(plane, "grpc") == 0, "grpc: %s", plane);
  printf("ok do_get over shm and grpc reads the same\n");

  /* Arrays outlive their stream, client and server (over shm: the ring's blocks, held). */
  struct ArrowArrayStream stream;
  WsClient* held_client = connect_with(url, keyfile, "shm");
  OK(ws_client_do_get(held_client, (const uint8_t*)"numbers.arrow", 13, NULL, &stream, &error));
  struct ArrowArray kept;
  CHECK(stream.get_next(&stream, &kept) == 0 && kept.release, "a first batch");
  int64_t kept_sum = sum_batch(&kept);
  stream.release(&stream);
  OK(ws_client_release(held_client, &error));

  /* A stream used after its release. */
  struct ArrowArray none;
  CHECK(stream.get_next(&stream, &none) == EINVAL, "get_next after release");
  CHECK(strstr(stream.get_last_error(&stream), "released"), "says so");
  CHECK(ws_stream_plane(&stream) == NULL, "no plane");
  printf("ok a stream used after its release answers EINVAL\n");

  /* DoPut: an upload lands whole, and reads back. */
  uint8_t up[64];
  size_t uplen = path_descriptor("up.arrow", up);
  struct ArrowArrayStream upload;
  counting_stream(&upload, "y", 8, 10000, -1);
  WsBuffers results;
  OK(ws_client_do_put(shm, up, uplen, &upload, NULL, &results, &error));
  CHECK(upload.release == NULL, "the input stream was released");
  results.release(&results);
  CHECK(read_sum(grpc, "up.arrow", NULL) == (int64_t)80000 * 79999 / 2, "the upload reads back");
  printf("ok do_put uploads a C stream\n");

  /* A malformed upload fails with the producer's message and leaves nothing. */
  uint8_t bad[64];
  size_t badlen = path_descriptor("bad.arrow", bad);
  counting_stream(&upload, "y", 8, 10000, 3);
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_do_put(shm, bad, badlen, &upload, NULL, &results, &error));
  CHECK(strstr(error.message, "failed on purpose"), "the producer's error: %s", error.message);
  struct ArrowArrayStream gone;
  FAILS(WS_STATUS_NOT_FOUND, ws_client_do_get(grpc, (const uint8_t*)"bad.arrow", 9, NULL, &gone, &error));
  /* A batch whose struct claims twice the rows its column holds: refused, never read past. */
  counting_stream(&upload, "y", 8, 10000, -1);
  ((struct Counting*)upload.private_data)->malformed_at = 2;
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_do_put(shm, bad, badlen, &upload, NULL, &results, &error));
  FAILS(WS_STATUS_NOT_FOUND, ws_client_do_get(grpc, (const uint8_t*)"bad.arrow", 9, NULL, &gone, &error));

  /* DoAction: CancelFlightInfo on a flight of files, which cannot be cancelled. */
  WsBuffers actions;
  OK(ws_client_get_flight_info(grpc, d, dlen, &info, &error));
  CHECK(info.len < 16384, "a short FlightInfo");
  uint8_t request[16384 + 3]; /* CancelFlightInfoRequest { info = 1 } */
  request[0] = 0x0a, request[1] = (uint8_t)(0x80 | (info.len & 0x7f)), request[2] = (uint8_t)(info.len >> 7);
  memcpy(request + 3, info.data, info.len);
  OK(ws_client_do_action(grpc, "CancelFlightInfo", request, info.len + 3, &actions, &error));
  info.release(&info);
  /* CancelFlightInfoResult { status = CANCEL_STATUS_NOT_CANCELLABLE (3) } */
  CHECK(actions.count == 1 && actions.lens[0] == 2 && actions.data[0][0] == 0x08 && actions.data[0][1] == 3,
        "NOT_CANCELLABLE");
  actions.release(&actions);
  FAILS(WS_STATUS_UNIMPLEMENTED, ws_client_do_action(grpc, "no-such-action", NULL, 0, &actions, &error));
  printf("ok do_action\n");

  /* Cancelling from another thread. */
  WsCancel* token = NULL;
  OK(ws_cancel_new(&token, &error));
  OK(ws_client_do_get(shm, (const uint8_t*)"numbers.arrow", 13, token, &stream, &error));
  /* One batch read, then another thread cancels: every read after fails. */
  struct ArrowArray first;
  CHECK(stream.get_next(&stream, &first) == 0 && first.release, "a first batch");
  first.release(&first);
  pthread_t thread;
  struct Canceller canceller = {token};
  pthread_create(&thread, NULL, cancel_now, &canceller);
  pthread_join(thread, NULL);
  struct ArrowArray batch;
  int rc = stream.get_next(&stream, &batch);
  CHECK(rc == ECANCELED, "cancelled mid-stream: %d", rc);
  FAILS(WS_STATUS_CANCELLED, ws_stream_error(&stream, &error));
  stream.release(&stream);
  OK(ws_cancel_release(token, &error));

  /* Bad arguments: each an error with a message, never a crash. */
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_list_flights(NULL, NULL, 0, &infos, &error));
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_do_get(shm, NULL, 5, NULL, &stream, &error));
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_do_get(shm, (const uint8_t*)"x", 1, NULL, NULL, &error));
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_do_put(shm, up, uplen, NULL, NULL, &results, &error));
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_get_flight_info(shm, (const uint8_t*)"\xff\xff", 2, &info, &error));
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_list_flights(held_client, NULL, 0, &infos, &error));
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_release(held_client, &error));
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_cancel_trigger(token, &error));
  FAILS(WS_STATUS_NOT_FOUND, ws_client_do_get(shm, (const uint8_t*)"nothing.arrow", 13, NULL, &stream, &error));
  WsClient* unused = NULL;
  WsOption unknown[] = {{"colour", "blue"}};
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_connect(url, unknown, 1, &unused, &error));
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_connect("http://nowhere", NULL, 0, &unused, &error));
  WsOption in_clear[] = {{"username", "anyone"}, {"password", "secret"}};
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_connect(url, in_clear, 2, &unused, &error));
  CHECK(strstr(error.message, "travels in clear"), "says why: %s", error.message);
  WsOption wrong[] = {{"key", "not the server's key"}, {"transport", "shm"}};
  WsClient* wrong_key = NULL;
  OK(ws_client_connect(url, wrong, 2, &wrong_key, &error));
  WsStatus refused = ws_client_do_get(wrong_key, (const uint8_t*)"numbers.arrow", 13, NULL, &stream, &error);
  CHECK(refused != WS_STATUS_OK && error.message, "a wrong key is refused");
  printf("ok a wrong key -> %d %s\n", refused, error.message);
  OK(ws_client_release(wrong_key, &error));

  OK(ws_client_release(shm, &error));
  OK(ws_client_release(grpc, &error));
  OK(ws_client_release(any, &error));
  OK(ws_server_shutdown(server, 1.0, NULL, &error));
  uint16_t port = 0;
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_server_port(server, &port, &error));

  /* The array kept from before reads as it did. */
  CHECK(sum_batch(&kept) == kept_sum && kept_sum > 0, "a kept array outlives its server");
  kept.release(&kept);
  printf("ok an array held past the client and server reads the same\n");

  callback_server(keyfile);
  if (error.release) error.release(&error);
  printf("all ok\n");
  return 0;
}

/* Reads one batch, waits for the caller to kill the server, reads on. */
static int get_across_a_death(const char* url, const char* ticket, const char* keyfile) {
  WsClient* client = connect_with(url, keyfile, "auto");
  struct ArrowArrayStream stream;
  OK(ws_client_do_get(client, (const uint8_t*)ticket, strlen(ticket), NULL, &stream, &error));
  struct ArrowArray batch;
  CHECK(stream.get_next(&stream, &batch) == 0 && batch.release, "a first batch");
  batch.release(&batch);
  printf("reading over %s\n", ws_stream_plane(&stream));
  fflush(stdout);
  char line[16];
  CHECK(fgets(line, sizeof line, stdin), "a line");
  int rc = 0;
  for (;;) {
    rc = stream.get_next(&stream, &batch);
    if (rc != 0 || !batch.release) break;
    batch.release(&batch);
  }
  WsStatus status = ws_stream_error(&stream, &error);
  printf("ended rc=%d status=%d %s\n", rc, status, error.message ? error.message : "");
  stream.release(&stream);
  OK(ws_client_release(client, &error));
  if (error.release) error.release(&error);
  return 0;
}

/* Sends 20 batches through an echoing exchange and reads them back. */
static int exchange(const char* url, const char* keyfile) {
  WsClient* client = connect_with(url, keyfile, "shm");
  uint8_t d[64];
  size_t dlen = path_descriptor("echo", d);
  struct ArrowArrayStream input, output;
  counting_stream(&input, "n", 20, 1000, -1);
  OK(ws_client_do_exchange(client, d, dlen, &input, NULL, &output, &error));
  CHECK(strcmp(ws_stream_plane(&output), "shm") == 0, "exchange over %s", ws_stream_plane(&output));
  int64_t sum = sum_stream(&output);
  CHECK(sum == (int64_t)20000 * 19999 / 2, "the echo: %ld", (long)sum);
  OK(ws_client_release(client, &error));
  if (error.release) error.release(&error);
  printf("exchanged ok\n");
  return 0;
}

static char* path_in(const char* dir, const char* name) {
  static char paths[8][512];
  static int next;
  char* p = paths[next++ % 8];
  snprintf(p, 512, "%s/%s", dir, name);
  return p;
}

/* A server that asks for a client certificate and a password, and clients with and without. */
static int over_tls(const char* dir, const char* certs, const char* keyfile) {
  WsOption serving[] = {{"key_file", keyfile},
                        {"tls_cert_chain_file", path_in(certs, "server.pem")},
                        {"tls_private_key_file", path_in(certs, "server.key")},
                        {"tls_client_ca_file", path_in(certs, "ca.pem")},
                        {"password_file", path_in(certs, "password")}};
  WsServer* server = NULL;
  OK(ws_server_serve_directory(dir, "127.0.0.1:0", serving, 5, &server, &error));
  char url[64];
  url_of(server, "grpc+tls", "localhost", url, sizeof url);

  WsOption full[] = {{"key_file", keyfile},
                     {"tls_roots_file", path_in(certs, "ca.pem")},
                     {"tls_cert_chain_file", path_in(certs, "client.pem")},
                     {"tls_private_key_file", path_in(certs, "client.key")},
                     {"username", "anyone"},
                     {"password_file", path_in(certs, "password")},
                     {"header.x-trace", "c-test"},
                     {"timeout", "30"}};
  WsClient* client = NULL;
  OK(ws_client_connect(url, full, 8, &client, &error));
  char plane[16];
  CHECK(read_sum(client, "numbers.arrow", plane) == (int64_t)1000000 * 999999 / 2, "read over TLS");
  printf("ok over mutual TLS with a password, the data over %s\n", plane);
  OK(ws_client_release(client, &error));

  /* No password: the server refuses the call. */
  OK(ws_client_connect(url, full, 4, &client, &error));
  struct ArrowArrayStream stream;
  FAILS(WS_STATUS_UNAUTHENTICATED, ws_client_do_get(client, (const uint8_t*)"numbers.arrow", 13, NULL, &stream, &error));
  OK(ws_client_release(client, &error));
  /* A wrong password. */
  WsOption wrong[] = {full[0], full[1], full[2], full[3], {"username", "anyone"}, {"password", "not it"}};
  FAILS(WS_STATUS_UNAUTHENTICATED, ws_client_connect(url, wrong, 6, &client, &error));
  /* The system's roots do not know this CA. */
  WsOption untrusted[] = {full[0], full[2], full[3], full[4], full[5]};
  WsStatus refused = ws_client_connect(url, untrusted, 5, &client, &error);
  CHECK(refused == WS_STATUS_UNAVAILABLE && error.message, "unknown CA: %d", refused);
  printf("ok a server not trusted -> %s\n", error.message);
  /* Verification off only by name: encrypted, the server unchecked. */
  WsOption unchecked[] = {full[0], {"tls_disable_server_verification", "true"}, full[2], full[3], full[4], full[5]};
  OK(ws_client_connect(url, unchecked, 6, &client, &error));
  CHECK(read_sum(client, "numbers.arrow", NULL) > 0, "read with verification off");
  OK(ws_client_release(client, &error));
  WsOption typo[] = {{"tls_disable_server_verification", "yes"}};
  FAILS(WS_STATUS_INVALID_ARGUMENT, ws_client_connect(url, typo, 1, &client, &error));

  OK(ws_server_shutdown(server, 1.0, NULL, &error));
  if (error.release) error.release(&error);
  printf("tls ok\n");
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "--get") == 0) return get_across_a_death(argv[2], argv[3], argv[4]);
  if (argc == 4 && strcmp(argv[1], "--exchange") == 0) return exchange(argv[2], argv[3]);
  if (argc == 5 && strcmp(argv[1], "--tls") == 0) return over_tls(argv[2], argv[3], argv[4]);
  if (argc == 4) return everything(argv[1], atol(argv[2]), argv[3]);
  fprintf(stderr, "usage: flight_test DIR ROWS KEYFILE | --get URL TICKET KEYFILE | --exchange URL KEYFILE | "
                  "--tls DIR CERTS KEYFILE\n");
  return 2;
}
