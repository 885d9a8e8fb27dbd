// A Flight client written with arrow-go, for the interop tests: it talks to a running
// `wirespeed serve` as a Go user would and prints what it found as one JSON object.
//
// Usage: goflight ADDRESS PASSWORD [CA_FILE] (an empty password: an open server; with a CA
// file, gRPC over TLS checked against it).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

type report struct {
	Flights         []string `json:"flights"`
	Rows            int64    `json:"rows"`
	Sum             int64    `json:"sum"`
	Acks            []string `json:"acks"`
	PutRows         int64    `json:"put_rows"`
	LowerCaseBearer bool     `json:"lower_case_bearer"`
	WrongPassword   string   `json:"wrong_password"`
}

func main() {
	if len(os.Args) > 2 && os.Args[2] == "newer" {
		if err := newer(os.Args[1]); err != nil {
			fmt.Fprintln(os.Stderr, "goflight:", err)
			os.Exit(1)
		}
		return
	}
	ca := ""
	if len(os.Args) > 3 {
		ca = os.Args[3]
	}
	if err := run(os.Args[1], os.Args[2], ca); err != nil {
		fmt.Fprintln(os.Stderr, "goflight:", err)
		os.Exit(1)
	}
}

func run(addr, password, ca string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	creds := insecure.NewCredentials()
	if ca != "" {
		var err error
		if creds, err = credentials.NewClientTLSFromFile(ca, ""); err != nil {
			return err
		}
	}
	client, err := flight.NewClientWithMiddleware(addr, nil, nil, grpc.WithTransportCredentials(creds))
	if err != nil {
		return err
	}
	defer client.Close()
	var out report
	if password != "" {
		// arrow-go sends Basic credentials unpadded (RawStdEncoding).
		if ctx, err = client.AuthenticateBasicToken(ctx, "go", password); err != nil {
			return fmt.Errorf("login: %w", err)
		}
		if _, err := client.AuthenticateBasicToken(context.Background(), "go", password+"x"); err != nil {
			out.WrongPassword = status.Code(err).String()
		}
	}
	if out.Flights, err = list(ctx, client); err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if out.Rows, out.Sum, err = get(ctx, client, "t.arrow"); err != nil {
		return fmt.Errorf("get: %w", err)
	}
	if out.Acks, err = put(ctx, client, "fromgo.arrow"); err != nil {
		return fmt.Errorf("put: %w", err)
	}
	if out.PutRows, _, err = get(ctx, client, "fromgo.arrow"); err != nil {
		return fmt.Errorf("get what was put: %w", err)
	}
	if password != "" {
		md, _ := metadata.FromOutgoingContext(ctx)
		token := strings.TrimPrefix(md.Get("authorization")[0], "Bearer ")
		lower := metadata.NewOutgoingContext(context.Background(), metadata.Pairs("authorization", "bearer "+token))
		_, err := list(lower, client)
		out.LowerCaseBearer = err == nil
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

func list(ctx context.Context, client flight.Client) ([]string, error) {
	stream, err := client.ListFlights(ctx, &flight.Criteria{})
	if err != nil {
		return nil, err
	}
	names := []string{}
	for {
		info, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return names, nil
		} else if err != nil {
			return nil, err
		}
		names = append(names, strings.Join(info.FlightDescriptor.Path, "/"))
	}
}

// get reads a flight whole: its rows, and the sum of its first column (int64).
func get(ctx context.Context, client flight.Client, name string) (int64, int64, error) {
	info, err := client.GetFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{name}})
	if err != nil {
		return 0, 0, err
	}
	var rows, sum int64
	for _, endpoint := range info.Endpoint {
		stream, err := client.DoGet(ctx, endpoint.Ticket)
		if err != nil {
			return 0, 0, err
		}
		reader, err := flight.NewRecordReader(stream)
		if err != nil {
			return 0, 0, err
		}
		for reader.Next() {
			batch := reader.RecordBatch()
			rows += batch.NumRows()
			for _, v := range batch.Column(0).(*array.Int64).Int64Values() {
				sum += v
			}
		}
		err = reader.Err()
		reader.Release()
		if err != nil {
			return 0, 0, err
		}
	}
	return rows, sum, nil
}

// put uploads three batches in lock step: each waits for the server to echo its metadata.
func put(ctx context.Context, client flight.Client, name string) ([]string, error) {
	stream, err := client.DoPut(ctx)
	if err != nil {
		return nil, err
	}
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}, {Name: "s", Type: arrow.BinaryTypes.String}}, nil)
	writer := flight.NewRecordWriter(stream, ipc.WithSchema(schema))
	writer.SetFlightDescriptor(&flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{name}})
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	acks := []string{}
	for i := 0; i < 3; i++ {
		for j := 0; j < 1000; j++ {
			b.Field(0).(*array.Int64Builder).Append(int64(i*1000 + j))
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("row %d", i*1000+j))
		}
		batch := b.NewRecordBatch()
		err := writer.WriteWithAppMetadata(batch, []byte(fmt.Sprintf("batch %d", i)))
		batch.Release()
		if err != nil {
			return nil, err
		}
		result, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		acks = append(acks, string(result.AppMetadata))
	}
	if err := writer.Close(); err != nil {
		return nil, err
	}
	if err := stream.CloseSend(); err != nil {
		return nil, err
	}
	for {
		if _, err := stream.Recv(); errors.Is(err, io.EOF) {
			return acks, nil
		} else if err != nil {
			return nil, err
		}
	}
}

// What the RPCs and actions Flight has grown since Arrow 13 answer: PollFlightInfo, and the
// session options over arrow-go's cookie middleware, CancelFlightInfo, and endpoints that
// expire (of a server run with --ticket-ttl 1), renewed with RenewFlightEndpoint
// (Usage: goflight ADDRESS newer).
type newerReport struct {
	PollProgress   float64           `json:"poll_progress"`
	PollRows       int64             `json:"poll_rows"`
	Ordered        bool              `json:"ordered"`
	AppMetadata    bool              `json:"app_metadata"`
	CancelStatus   string            `json:"cancel_status"`
	RenewedLater   bool              `json:"renewed_later"`
	RenewedRows    int64             `json:"renewed_rows"`
	Expired        string            `json:"expired"`
	SessionOptions map[string]string `json:"session_options"`
	Closed         bool              `json:"closed"`
}

// rowsOf reads one ticket's stream to its end.
func rowsOf(ctx context.Context, client flight.Client, ticket *flight.Ticket) (int64, error) {
	stream, err := client.DoGet(ctx, ticket)
	if err != nil {
		return 0, err
	}
	reader, err := flight.NewRecordReader(stream)
	if err != nil {
		return 0, err
	}
	defer reader.Release()
	var rows int64
	for reader.Next() {
		rows += reader.RecordBatch().NumRows()
	}
	return rows, reader.Err()
}

// expiring reports what a server whose tickets expire answers: the renewed endpoint, and the
// old ticket once it has expired.
func expiring(ctx context.Context, client flight.Client, info *flight.FlightInfo, out *newerReport) error {
	cancelled, err := client.CancelFlightInfo(ctx, &flight.CancelFlightInfoRequest{Info: info})
	if err != nil {
		return fmt.Errorf("cancel: %w", err)
	}
	out.CancelStatus = cancelled.GetStatus().String()
	endpoint := info.Endpoint[0]
	if endpoint.GetExpirationTime() == nil {
		return errors.New("the endpoint has no expiration time")
	}
	// Renewed late in its life, the new ticket outlives the old one.
	expires := endpoint.GetExpirationTime().AsTime()
	time.Sleep(time.Until(expires) - 400*time.Millisecond)
	renewed, err := client.RenewFlightEndpoint(ctx, &flight.RenewFlightEndpointRequest{Endpoint: endpoint})
	if err != nil {
		return fmt.Errorf("renew: %w", err)
	}
	out.RenewedLater = renewed.GetExpirationTime().AsTime().After(expires)
	time.Sleep(time.Until(expires) + 100*time.Millisecond)
	if out.RenewedRows, err = rowsOf(ctx, client, renewed.Ticket); err != nil {
		return fmt.Errorf("get by the renewed ticket: %w", err)
	}
	_, err = rowsOf(ctx, client, endpoint.Ticket)
	out.Expired = status.Code(err).String()
	return nil
}

func newer(addr string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	middleware := []flight.ClientMiddleware{flight.NewClientCookieMiddleware()}
	client, err := flight.NewClientWithMiddleware(addr, nil, middleware, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer client.Close()
	var out newerReport
	poll, err := client.PollFlightInfo(ctx, &flight.FlightDescriptor{Type: flight.DescriptorPATH, Path: []string{"t.arrow"}})
	if err != nil {
		return fmt.Errorf("poll: %w", err)
	}
	out.PollProgress = poll.GetProgress()
	out.PollRows = poll.GetInfo().GetTotalRecords()
	out.Ordered = poll.GetInfo().GetOrdered()
	out.AppMetadata = strings.Contains(string(poll.GetInfo().GetAppMetadata()), `"format":"arrow-file"`)
	if err := expiring(ctx, client, poll.GetInfo(), &out); err != nil {
		return err
	}
	options, err := flight.NewSessionOptionValues(map[string]any{"name": "wirespeed", "answer": int64(42)})
	if err != nil {
		return err
	}
	if _, err := client.SetSessionOptions(ctx, &flight.SetSessionOptionsRequest{SessionOptions: options}); err != nil {
		return fmt.Errorf("set session options: %w", err)
	}
	got, err := client.GetSessionOptions(ctx, &flight.GetSessionOptionsRequest{})
	if err != nil {
		return fmt.Errorf("get session options: %w", err)
	}
	out.SessionOptions = map[string]string{}
	for name, value := range got.GetSessionOptions() {
		if s := value.GetStringValue(); s != "" {
			out.SessionOptions[name] = s
		} else {
			out.SessionOptions[name] = fmt.Sprint(value.GetInt64Value())
		}
	}
	closed, err := client.CloseSession(ctx, &flight.CloseSessionRequest{})
	if err != nil {
		return fmt.Errorf("close session: %w", err)
	}
	out.Closed = closed.GetStatus() == flight.CloseSessionResultClosed
	return json.NewEncoder(os.Stdout).Encode(out)
}
