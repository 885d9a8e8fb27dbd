package io.wirespeed.flight;

import java.nio.charset.StandardCharsets;
import java.util.Map;

import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.ipc.ArrowReader;

/**
 * Reads one flight with wirespeed's Java client or flight-core's, timed (bench/languages.sh):
 * {@code ReadFlight wirespeed|arrow URL TICKET [TIMES]}, TIMES reads on one client, each timed;
 * the key file from WIRESPEED_KEY_FILE.
 */
public final class ReadFlight {
  public static void main(String[] args) throws Exception {
    Ticket ticket = new Ticket(args[2].getBytes(StandardCharsets.UTF_8));
    int times = args.length > 3 ? Integer.parseInt(args[3]) : 1;
    try (BufferAllocator allocator = new RootAllocator()) {
      if (args[0].equals("wirespeed")) {
        try (WirespeedClient client = WirespeedClient.connect(allocator, args[1], Map.of("key_file", System.getenv("WIRESPEED_KEY_FILE")))) {
          for (int i = 0; i < times; i++) {
            long start = System.nanoTime();
            long rows = 0;
            try (ArrowReader reader = client.getStream(ticket)) {
              while (reader.loadNextBatch()) rows += reader.getVectorSchemaRoot().getRowCount();
            }
            report(client.lastPlane(), rows, start);
          }
        }
      } else {
        try (FlightClient client = FlightClient.builder(allocator, new Location(args[1].replace("grpc://", "grpc+tcp://"))).build()) {
          for (int i = 0; i < times; i++) {
            long start = System.nanoTime();
            long rows = 0;
            try (FlightStream stream = client.getStream(ticket)) {
              while (stream.next()) rows += stream.getRoot().getRowCount();
            }
            report("grpc", rows, start);
          }
        }
      }
    }
  }

  private static void report(String plane, long rows, long start) {
    System.out.printf("plane %s rows %d seconds %.6f%n", plane, rows, (System.nanoTime() - start) / 1e9);
  }
}
