// Package wirespeed is wirespeed's Flight client for Go, thin over the C library
// (crates/wirespeed-c): calls shaped like arrow-go's flight.Client, batches as arrow-go's
// array.RecordReader through its cdata package, over a data plane (shared memory on one host,
// without a copy) where the server offers one, else gRPC.
//
// Build with the library where the linker finds it:
// CGO_LDFLAGS="-L/path/to/target/release -Wl,-rpath,/path/to/target/release".
package wirespeed

/*
#cgo CFLAGS: -I${SRCDIR}/../crates/wirespeed-c/include
#cgo LDFLAGS: -lwirespeed_c
#include <stdlib.h>
#include "wirespeed.h"

static void release_error(WsError* e) { if (e->release) e->release(e); }
static void release_buffer(WsBuffer* b) { if (b->release) b->release(b); }
static void release_buffers(WsBuffers* b) { if (b->release) b->release(b); }
static const uint8_t* run_data(const WsBuffers* b, size_t i) { return b->data[i]; }
static size_t run_len(const WsBuffers* b, size_t i) { return b->lens[i]; }
*/
import "C"

import (
	"context"
	"fmt"
	"sort"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/cdata"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Version is the C library's version.
func Version() string { return C.GoString(C.ws_version()) }

// call runs a C call with a fresh error; its failure as the gRPC status error that arrow-go's
// client gives for the same code (status.Code(err) reads it).
func call(run func(e *C.WsError) uint32) error {
	e := (*C.WsError)(C.calloc(1, C.sizeof_WsError))
	defer C.free(unsafe.Pointer(e))
	defer C.release_error(e)
	if st := run(e); st != C.WS_STATUS_OK {
		message := "wirespeed: no message"
		if e.message != nil {
			message = C.GoString(e.message)
		}
		return status.Error(codes.Code(st), message)
	}
	return nil
}

// cOptions holds options as C strings until freed.
type cOptions struct {
	list    *C.WsOption
	n       C.size_t
	strings []*C.char
}

func newOptions(options map[string]string) *cOptions {
	o := &cOptions{n: C.size_t(len(options))}
	if len(options) == 0 {
		return o
	}
	keys := make([]string, 0, len(options))
	for k := range options {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	o.list = (*C.WsOption)(C.calloc(C.size_t(len(options)), C.sizeof_WsOption))
	slots := unsafe.Slice(o.list, len(options))
	for i, k := range keys {
		key, value := C.CString(k), C.CString(options[k])
		o.strings = append(o.strings, key, value)
		slots[i] = C.WsOption{key: key, value: value}
	}
	return o
}

func (o *cOptions) free() {
	for _, s := range o.strings {
		C.free(unsafe.Pointer(s))
	}
	C.free(unsafe.Pointer(o.list))
}

// bytesArg is Go bytes copied into C memory for one call (C may not keep Go pointers).
func bytesArg(b []byte) (*C.uint8_t, C.size_t, func()) {
	if len(b) == 0 {
		return nil, 0, func() {}
	}
	p := C.CBytes(b)
	return (*C.uint8_t)(p), C.size_t(len(b)), func() { C.free(p) }
}

func takeRuns(runs *C.WsBuffers) [][]byte {
	out := make([][]byte, int(runs.count))
	for i := range out {
		out[i] = C.GoBytes(unsafe.Pointer(C.run_data(runs, C.size_t(i))), C.int(C.run_len(runs, C.size_t(i))))
	}
	C.release_buffers(runs)
	return out
}

// Client is a Flight client; safe to use from several goroutines at once.
type Client struct {
	handle *C.WsClient
}

// Connect connects to grpc://host:port, grpc+tls://host:port or grpc+unix://PATH. Options are
// ws_client_connect's: "key" or "key_file" (the data planes'; without one, gRPC only),
// "transport", "tls_roots", "username" and "password", "header.NAME", "timeout", ...
func Connect(url string, options map[string]string) (*Client, error) {
	o := newOptions(options)
	defer o.free()
	curl := C.CString(url)
	defer C.free(unsafe.Pointer(curl))
	handle := (**C.WsClient)(C.calloc(1, C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(handle))
	if err := call(func(e *C.WsError) uint32 { return C.ws_client_connect(curl, o.list, o.n, handle, e) }); err != nil {
		return nil, err
	}
	return &Client{handle: *handle}, nil
}

// Close releases the client; readers it opened stay readable.
func (c *Client) Close() error {
	return call(func(e *C.WsError) uint32 { return C.ws_client_release(c.handle, e) })
}

// ListFlights lists the flights matching criteria (empty for all).
func (c *Client) ListFlights(ctx context.Context, criteria []byte) ([]*flight.FlightInfo, error) {
	crit, n, done := bytesArg(criteria)
	defer done()
	runs := (*C.WsBuffers)(C.calloc(1, C.sizeof_WsBuffers))
	defer C.free(unsafe.Pointer(runs))
	if err := call(func(e *C.WsError) uint32 { return C.ws_client_list_flights(c.handle, crit, n, runs, e) }); err != nil {
		return nil, err
	}
	var infos []*flight.FlightInfo
	for _, raw := range takeRuns(runs) {
		info := &flight.FlightInfo{}
		if err := proto.Unmarshal(raw, info); err != nil {
			return nil, fmt.Errorf("wirespeed: a FlightInfo that does not decode: %w", err)
		}
		infos = append(infos, info)
	}
	return infos, nil
}

// GetFlightInfo says where and how to read the flight desc names.
func (c *Client) GetFlightInfo(ctx context.Context, desc *flight.FlightDescriptor) (*flight.FlightInfo, error) {
	raw, err := proto.Marshal(desc)
	if err != nil {
		return nil, err
	}
	d, n, done := bytesArg(raw)
	defer done()
	buf := (*C.WsBuffer)(C.calloc(1, C.sizeof_WsBuffer))
	defer C.free(unsafe.Pointer(buf))
	if err := call(func(e *C.WsError) uint32 { return C.ws_client_get_flight_info(c.handle, d, n, buf, e) }); err != nil {
		return nil, err
	}
	bytes := C.GoBytes(unsafe.Pointer(buf.data), C.int(buf.len))
	C.release_buffer(buf)
	info := &flight.FlightInfo{}
	return info, proto.Unmarshal(bytes, info)
}

// cancelOn triggers a token when ctx ends; stop ends the watch. A context that never ends
// (context.Background) needs neither token nor watcher.
func cancelOn(ctx context.Context) (token *C.WsCancel, stop func(), err error) {
	if ctx.Done() == nil {
		return nil, func() {}, nil
	}
	slot := (**C.WsCancel)(C.calloc(1, C.size_t(unsafe.Sizeof(uintptr(0)))))
	defer C.free(unsafe.Pointer(slot))
	if err := call(func(e *C.WsError) uint32 { return C.ws_cancel_new(slot, e) }); err != nil {
		return nil, nil, err
	}
	token = *slot
	quit := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			call(func(e *C.WsError) uint32 { return C.ws_cancel_trigger(token, e) })
		case <-quit:
		}
	}()
	return token, func() {
		close(quit)
		call(func(e *C.WsError) uint32 { return C.ws_cancel_release(token, e) })
	}, nil
}

// Reader is a DoGet's batches: an array.RecordReader, and the plane that carries them.
type Reader struct {
	array.RecordReader
	// Plane is "shm", "tcp", "ucx", "grpc", ...
	Plane string
	stop  func()
}

// Release releases the reader once its last reference goes.
func (r *Reader) Release() {
	r.RecordReader.Release()
	if r.stop != nil {
		r.stop()
		r.stop = nil
	}
}

// DoGet reads ticket's batches. Cancelling ctx cancels the call; records keep their memory
// (over shared memory, the ring's blocks) until released.
func (c *Client) DoGet(ctx context.Context, ticket *flight.Ticket) (*Reader, error) {
	t, n, done := bytesArg(ticket.GetTicket())
	defer done()
	token, stop, err := cancelOn(ctx)
	if err != nil {
		return nil, err
	}
	stream := (*C.struct_ArrowArrayStream)(C.calloc(1, C.sizeof_struct_ArrowArrayStream))
	defer C.free(unsafe.Pointer(stream))
	if err := call(func(e *C.WsError) uint32 { return C.ws_client_do_get(c.handle, t, n, token, stream, e) }); err != nil {
		stop()
		return nil, err
	}
	plane := C.GoString(C.ws_stream_plane(stream))
	// The reader moves the stream out of our struct: freeing the struct after is fine.
	imported, err := cdata.ImportCRecordReader((*cdata.CArrowArrayStream)(unsafe.Pointer(stream)), nil)
	if err != nil {
		stop()
		return nil, err
	}
	return &Reader{RecordReader: imported.(array.RecordReader), Plane: plane, stop: stop}, nil
}

// DoPut uploads every record of reader to the flight desc names and returns the server's
// PutResults' app_metadata.
func (c *Client) DoPut(ctx context.Context, desc *flight.FlightDescriptor, reader array.RecordReader) ([][]byte, error) {
	raw, err := proto.Marshal(desc)
	if err != nil {
		return nil, err
	}
	d, n, done := bytesArg(raw)
	defer done()
	token, stop, err := cancelOn(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	stream := (*C.struct_ArrowArrayStream)(C.calloc(1, C.sizeof_struct_ArrowArrayStream))
	defer C.free(unsafe.Pointer(stream))
	cdata.ExportRecordReader(reader, (*cdata.CArrowArrayStream)(unsafe.Pointer(stream)))
	runs := (*C.WsBuffers)(C.calloc(1, C.sizeof_WsBuffers))
	defer C.free(unsafe.Pointer(runs))
	if err := call(func(e *C.WsError) uint32 {
		return C.ws_client_do_put(c.handle, d, n, stream, token, runs, e)
	}); err != nil {
		return nil, err
	}
	return takeRuns(runs), nil
}
