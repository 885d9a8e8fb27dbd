package wirespeed

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

const testKey = "a key for the Go tests"

// records is a table of n rows of an int64 and a string column, in batches of 50,000.
func records(t *testing.T, n int64) array.RecordReader {
	schema := arrow.NewSchema([]arrow.Field{{Name: "a", Type: arrow.PrimitiveTypes.Int64}, {Name: "s", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
	var batches []arrow.RecordBatch
	for start := int64(0); start < n; start += 50000 {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		for i := start; i < min(start+50000, n); i++ {
			b.Field(0).(*array.Int64Builder).Append(i)
			if i%7 == 0 {
				b.Field(1).AppendNull()
			} else {
				b.Field(1).(*array.StringBuilder).Append("row")
			}
		}
		batches = append(batches, b.NewRecordBatch())
		b.Release()
	}
	reader, err := array.NewRecordReader(schema, batches)
	if err != nil {
		t.Fatal(err)
	}
	return reader
}

// serve starts `wirespeed serve` on a directory holding t.arrow and returns its URL.
func serve(t *testing.T, rows int64) (string, string) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "t.arrow"))
	if err != nil {
		t.Fatal(err)
	}
	reader := records(t, rows)
	w, err := ipc.NewFileWriter(f, ipc.WithSchema(reader.Schema()))
	if err != nil {
		t.Fatal(err)
	}
	for reader.Next() {
		if err := w.Write(reader.RecordBatch()); err != nil {
			t.Fatal(err)
		}
	}
	w.Close()
	f.Close()
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(testKey+"\n"), 0o600)
	bin := os.Getenv("WIRESPEED_BIN")
	if bin == "" {
		bin = "../target/debug/wirespeed"
	}
	cmd := exec.Command(bin, "serve", dir, "--listen", "127.0.0.1:0", "--key-file", keyFile)
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stderr)
	for lines.Scan() {
		if url := regexp.MustCompile(`grpc://\S+`).FindString(lines.Text()); url != "" {
			go io.Copy(io.Discard, stderr)
			return url, keyFile
		}
	}
	t.Fatal("serve did not say where it listens")
	return "", ""
}

func readAll(t *testing.T, r array.RecordReader) arrow.Table {
	var batches []arrow.RecordBatch
	for r.Next() {
		rec := r.RecordBatch()
		rec.Retain()
		batches = append(batches, rec)
	}
	if err := r.Err(); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return array.NewTableFromRecords(r.Schema(), batches)
}

func TestDoGetOverShmReadsWhatArrowGosClientReadsOverGrpc(t *testing.T) {
	url, keyFile := serve(t, 300000)
	ctx := context.Background()
	client, err := Connect(url, map[string]string{"key_file": keyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	desc := &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"t.arrow"}}
	info, err := client.GetFlightInfo(ctx, desc)
	if err != nil {
		t.Fatal(err)
	}
	reader, err := client.DoGet(ctx, info.Endpoint[0].Ticket)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Release()
	if reader.Plane != "shm" {
		t.Fatalf("plane %q", reader.Plane)
	}
	ours := readAll(t, reader)

	theirs, err := flight.NewClientWithMiddleware(strings.TrimPrefix(url, "grpc://"), nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer theirs.Close()
	stream, err := theirs.DoGet(ctx, info.Endpoint[0].Ticket)
	if err != nil {
		t.Fatal(err)
	}
	expected, err := flight.NewRecordReader(stream)
	if err != nil {
		t.Fatal(err)
	}
	defer expected.Release()
	want := readAll(t, expected)
	if ours.NumRows() != 300000 || !array.TableEqual(ours, want) {
		t.Fatalf("%d rows, equal %v", ours.NumRows(), array.TableEqual(ours, want))
	}
	flights, err := client.ListFlights(ctx, nil)
	if err != nil || len(flights) != 1 {
		t.Fatalf("%v %v", flights, err)
	}
}

func TestDoPutUploadsAndTheUploadReadsBack(t *testing.T) {
	url, keyFile := serve(t, 10)
	ctx := context.Background()
	client, err := Connect(url, map[string]string{"key_file": keyFile, "transport": "shm"})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	desc := &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"fromgo.arrow"}}
	if _, err := client.DoPut(ctx, desc, records(t, 120000)); err != nil {
		t.Fatal(err)
	}
	reader, err := client.DoGet(ctx, &flight.Ticket{Ticket: []byte("fromgo.arrow")})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Release()
	if got := readAll(t, reader); got.NumRows() != 120000 {
		t.Fatalf("%d rows", got.NumRows())
	}
}

func TestErrorsCarryFlightsCodes(t *testing.T) {
	url, keyFile := serve(t, 10)
	ctx := context.Background()
	client, err := Connect(url, map[string]string{"key_file": keyFile})
	if err != nil {
		t.Fatal(err)
	}
	_, err = client.DoGet(ctx, &flight.Ticket{Ticket: []byte("missing.arrow")})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("missing: %v", err)
	}
	if _, err := Connect(url, map[string]string{"colour": "blue"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("unknown option: %v", err)
	}
	client.Close()
	if _, err := client.ListFlights(ctx, nil); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("closed client: %v", err)
	}
	if Version() == "" {
		t.Fatal("no version")
	}
}

func TestCancellingTheContextEndsAReadMidStream(t *testing.T) {
	url, keyFile := serve(t, 2000000)
	ctx, cancel := context.WithCancel(context.Background())
	client, err := Connect(url, map[string]string{"key_file": keyFile})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	reader, err := client.DoGet(ctx, &flight.Ticket{Ticket: []byte("t.arrow")})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Release()
	reader.Next()
	cancel()
	time.Sleep(200 * time.Millisecond)
	for reader.Next() {
		time.Sleep(10 * time.Millisecond)
	}
	if err := reader.Err(); err == nil || !strings.Contains(err.Error(), "cancelled") {
		t.Fatalf("after cancel: %v", err)
	}
}
