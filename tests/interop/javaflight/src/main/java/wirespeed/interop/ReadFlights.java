package wirespeed.interop;

import java.util.ArrayList;
import java.util.List;

import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.Location;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.VectorSchemaRoot;

/**
 * Reads each flight named on the command line from a Flight server as Arrow's Java examples
 * do: GetFlightInfo, then DoGet of each endpoint's ticket at the endpoint's location (or the
 * server's, if it names none). Prints one JSON line per flight: its rows and the sum of its
 * column "x", or the error the client met.
 *
 * <p>Usage: ReadFlights grpc+tcp://host:port name...
 */
public final class ReadFlights {
  public static void main(String[] args) throws Exception {
    Location server = new Location(args[0]);
    int failed = 0;
    try (BufferAllocator allocator = new RootAllocator();
        FlightClient client = FlightClient.builder(allocator, server).build()) {
      for (int i = 1; i < args.length; i++) {
        String name = args[i];
        try {
          FlightInfo info = client.getInfo(FlightDescriptor.path(name));
          long rows = 0;
          long sum = 0;
          List<String> locations = new ArrayList<>();
          for (FlightEndpoint endpoint : info.getEndpoints()) {
            Location at = endpoint.getLocations().isEmpty() ? server : endpoint.getLocations().get(0);
            locations.add(at.getUri().toString());
            try (FlightClient data = FlightClient.builder(allocator, at).build();
                FlightStream stream = data.getStream(endpoint.getTicket())) {
              VectorSchemaRoot root = stream.getRoot();
              while (stream.next()) {
                rows += root.getRowCount();
                FieldVector x = root.getVector("x");
                if (x instanceof BigIntVector) {
                  BigIntVector xs = (BigIntVector) x;
                  for (int r = 0; r < root.getRowCount(); r++) {
                    sum += xs.get(r);
                  }
                }
              }
            }
          }
          System.out.printf(
              "{\"name\": \"%s\", \"rows\": %d, \"sum\": %d, \"location\": \"%s\"}%n",
              name, rows, sum, String.join(",", locations));
        } catch (Exception e) {
          failed++;
          String why = String.valueOf(e.getMessage()).replace("\\", "\\\\").replace("\"", "'").replace("\n", " ");
          System.out.printf("{\"name\": \"%s\", \"error\": \"%s\"}%n", name, why);
        }
      }
    }
    System.exit(failed == 0 ? 0 : 1);
  }
}
