// Command flightread reads one flight with wirespeed's Go client or arrow-go's, timed:
//
//	flightread wirespeed|arrow URL TICKET [TIMES]
//
// It reads the flight TIMES times (1) on one client, each read timed. The key comes from
// WIRESPEED_KEY_FILE (wirespeed only). bench/languages.sh runs it.
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/flight"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	wirespeed "github.com/wirespeed/wirespeed/go"
)

func main() {
	if len(os.Args) < 4 {
		fmt.Fprintln(os.Stderr, "usage: flightread wirespeed|arrow URL TICKET [TIMES]")
		os.Exit(2)
	}
	which, url, ticket := os.Args[1], os.Args[2], &flight.Ticket{Ticket: []byte(os.Args[3])}
	times := 1
	if len(os.Args) > 4 {
		n, err := strconv.Atoi(os.Args[4])
		check(err)
		times = n
	}
	ctx := context.Background()
	var read func() (array.RecordReader, string)
	if which == "wirespeed" {
		client, err := wirespeed.Connect(url, map[string]string{"key_file": os.Getenv("WIRESPEED_KEY_FILE")})
		check(err)
		defer client.Close()
		read = func() (array.RecordReader, string) {
			r, err := client.DoGet(ctx, ticket)
			check(err)
			return r, r.Plane
		}
	} else {
		client, err := flight.NewClientWithMiddleware(strings.TrimPrefix(url, "grpc://"), nil, nil,
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		check(err)
		defer client.Close()
		read = func() (array.RecordReader, string) {
			stream, err := client.DoGet(ctx, ticket)
			check(err)
			r, err := flight.NewRecordReader(stream)
			check(err)
			return r, "grpc"
		}
	}
	for i := 0; i < times; i++ {
		start := time.Now()
		reader, plane := read()
		rows := int64(0)
		for reader.Next() {
			rows += reader.RecordBatch().NumRows()
		}
		check(reader.Err())
		reader.Release()
		fmt.Printf("plane %s rows %d seconds %.6f\n", plane, rows, time.Since(start).Seconds())
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "flightread:", err)
		os.Exit(1)
	}
}
