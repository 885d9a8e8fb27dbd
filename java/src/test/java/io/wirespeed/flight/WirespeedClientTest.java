package io.wirespeed.flight;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.BufferedReader;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.apache.arrow.flight.CallStatus;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.FlightRuntimeException;
import org.apache.arrow.flight.FlightStream;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;
import org.apache.arrow.vector.BigIntVector;
import org.apache.arrow.vector.VarCharVector;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.ipc.ArrowFileWriter;
import org.apache.arrow.vector.ipc.ArrowReader;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.FieldType;
import org.apache.arrow.vector.types.pojo.Schema;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class WirespeedClientTest {
  static final String KEY = "a key for the Java tests";
  static final Schema SCHEMA = new Schema(List.of(
      new Field("a", FieldType.notNullable(new ArrowType.Int(64, true)), null),
      new Field("s", FieldType.nullable(new ArrowType.Utf8()), null)));

  @TempDir Path dir;
  BufferAllocator allocator;
  Process serve;
  String url;
  Path keyFile;

  /** Writes `rows` rows to `path` as an Arrow file, in batches of 50,000. */
  void write(Path path, int rows) throws Exception {
    try (VectorSchemaRoot root = VectorSchemaRoot.create(SCHEMA, allocator);
        FileOutputStream out = new FileOutputStream(path.toFile());
        ArrowFileWriter writer = new ArrowFileWriter(root, null, out.getChannel())) {
      writer.start();
      for (int start = 0; start < rows; start += 50_000) {
        int n = Math.min(50_000, rows - start);
        BigIntVector a = (BigIntVector) root.getVector("a");
        VarCharVector s = (VarCharVector) root.getVector("s");
        a.allocateNew(n);
        s.allocateNew(n);
        for (int i = 0; i < n; i++) {
          a.set(i, start + i);
          if ((start + i) % 7 == 0) s.setNull(i); else s.setSafe(i, ("row " + (start + i)).getBytes(StandardCharsets.UTF_8));
        }
        root.setRowCount(n);
        writer.writeBatch();
      }
      writer.end();
    }
  }

  @BeforeEach
  void start() throws Exception {
    allocator = new RootAllocator();
    Path data = Files.createDirectories(dir.resolve("data"));
    write(data.resolve("t.arrow"), 300_000);
    keyFile = dir.resolve("key");
    Files.writeString(keyFile, KEY + "\n");
    serve = new ProcessBuilder(System.getProperty("wirespeed.bin"), "serve", data.toString(), "--listen", "127.0.0.1:0",
        "--key-file", keyFile.toString()).redirectErrorStream(true).start();
    BufferedReader lines = new BufferedReader(new InputStreamReader(serve.getInputStream(), StandardCharsets.UTF_8));
    Pattern grpc = Pattern.compile("grpc://\\S+");
    for (String line; (line = lines.readLine()) != null; ) {
      Matcher m = grpc.matcher(line);
      if (m.find()) {
        url = m.group();
        break;
      }
    }
    assertTrue(url != null, "serve says where it listens");
    Thread drain = new Thread(() -> lines.lines().forEach(l -> {}));
    drain.setDaemon(true);
    drain.start();
  }

  @AfterEach
  void stop() {
    serve.destroyForcibly();
    allocator.close();
  }

  static String contents(ArrowReader reader) throws Exception {
    StringBuilder out = new StringBuilder();
    while (reader.loadNextBatch()) out.append(reader.getVectorSchemaRoot().contentToTSVString());
    return out.toString();
  }

  @Test
  void getStreamOverShmReadsWhatFlightCoreReadsOverGrpc() throws Exception {
    FlightDescriptor descriptor = FlightDescriptor.path("t.arrow");
    String ours;
    try (WirespeedClient client = WirespeedClient.connect(allocator, url, Map.of("key_file", keyFile.toString()))) {
      FlightInfo info = client.getInfo(descriptor);
      assertEquals(300_000, info.getRecords());
      try (ArrowReader reader = client.getStream(info.getEndpoints().get(0).getTicket())) {
        ours = contents(reader);
      }
      assertEquals("shm", client.lastPlane());
    }
    String theirs;
    try (FlightClient client = FlightClient.builder(allocator, new Location(url.replace("grpc://", "grpc+tcp://"))).build();
        FlightStream stream = client.getStream(new Ticket("t.arrow".getBytes(StandardCharsets.UTF_8)))) {
      StringBuilder out = new StringBuilder();
      while (stream.next()) out.append(stream.getRoot().contentToTSVString());
      theirs = out.toString();
    }
    assertFalse(ours.isEmpty());
    assertEquals(theirs, ours);
  }

  @Test
  void putUploadsAReaderThatReadsBack() throws Exception {
    write(dir.resolve("upload.arrow"), 120_000);
    try (WirespeedClient client = WirespeedClient.connect(allocator, url, Map.of("key_file", keyFile.toString(), "transport", "shm"));
        java.io.FileInputStream in = new java.io.FileInputStream(dir.resolve("upload.arrow").toFile());
        ArrowReader upload = new org.apache.arrow.vector.ipc.ArrowFileReader(in.getChannel(), allocator)) {
      client.put(FlightDescriptor.path("fromjava.arrow"), upload);
      try (ArrowReader back = client.getStream(new Ticket("fromjava.arrow".getBytes(StandardCharsets.UTF_8)))) {
        long rows = 0;
        while (back.loadNextBatch()) rows += back.getVectorSchemaRoot().getRowCount();
        assertEquals(120_000, rows);
      }
    }
  }

  @Test
  void failuresAreFlightCoresExceptionsWithTheirCodes() {
    try (WirespeedClient client = WirespeedClient.connect(allocator, url, Map.of("key_file", keyFile.toString()))) {
      FlightRuntimeException missing = assertThrows(FlightRuntimeException.class,
          () -> client.getStream(new Ticket("missing.arrow".getBytes(StandardCharsets.UTF_8))));
      assertEquals(CallStatus.NOT_FOUND.code(), missing.status().code());
      FlightRuntimeException unknown = assertThrows(FlightRuntimeException.class,
          () -> WirespeedClient.connect(allocator, url, Map.of("colour", "blue")));
      assertEquals(CallStatus.INVALID_ARGUMENT.code(), unknown.status().code());
    }
    assertFalse(WirespeedClient.version().isEmpty());
  }

  @Test
  void aCancelledReadEndsWithAnError() throws Exception {
    try (WirespeedClient client = WirespeedClient.connect(allocator, url, Map.of("key_file", keyFile.toString()));
        WirespeedClient.Cancel cancel = new WirespeedClient.Cancel();
        ArrowReader reader = client.getStream(new Ticket("t.arrow".getBytes(StandardCharsets.UTF_8)), cancel)) {
      assertTrue(reader.loadNextBatch());
      cancel.trigger();
      FlightRuntimeException e = assertThrows(FlightRuntimeException.class, () -> { while (reader.loadNextBatch()) { } });
      assertEquals(CallStatus.CANCELLED.code(), e.status().code(), e.toString());
    }
  }

  @Test
  void vectorsTakenFromABatchOutliveTheReaderAndTheClient() throws Exception {
    BigIntVector kept = new BigIntVector("kept", allocator);
    try (WirespeedClient client = WirespeedClient.connect(allocator, url, Map.of("key_file", keyFile.toString()));
        ArrowReader reader = client.getStream(new Ticket("t.arrow".getBytes(StandardCharsets.UTF_8)))) {
      assertTrue(reader.loadNextBatch());
      reader.getVectorSchemaRoot().getVector("a").makeTransferPair(kept).transfer();
      assertTrue(reader.loadNextBatch());
      assertEquals("shm", client.lastPlane());
    }
    try (kept) {
      assertEquals(50_000, kept.getValueCount());
      for (int i = 0; i < 50_000; i++) assertEquals(i, kept.get(i));
    }
  }

  @Test
  void nestedColumnsReadAsFlightCoreReadsThem() throws Exception {
    Schema nested = new Schema(List.of(new Field("l", FieldType.nullable(new ArrowType.List()),
        List.of(new Field("item", FieldType.nullable(new ArrowType.Int(32, true)), null)))));
    try (VectorSchemaRoot root = VectorSchemaRoot.create(nested, allocator);
        FileOutputStream out = new FileOutputStream(dir.resolve("data").resolve("nested.arrow").toFile());
        ArrowFileWriter writer = new ArrowFileWriter(root, null, out.getChannel())) {
      writer.start();
      org.apache.arrow.vector.complex.impl.UnionListWriter lists = ((org.apache.arrow.vector.complex.ListVector) root.getVector("l")).getWriter();
      for (int i = 0; i < 1000; i++) {
        lists.setPosition(i);
        lists.startList();
        for (int j = 0; j < i % 5; j++) lists.writeInt(i * 10 + j);
        lists.endList();
      }
      root.setRowCount(1000);
      writer.writeBatch();
      writer.end();
    }
    Ticket ticket = new Ticket("nested.arrow".getBytes(StandardCharsets.UTF_8));
    String ours;
    try (WirespeedClient client = WirespeedClient.connect(allocator, url, Map.of("key_file", keyFile.toString()));
        ArrowReader reader = client.getStream(ticket)) {
      ours = contents(reader);
    }
    try (FlightClient client = FlightClient.builder(allocator, new Location(url.replace("grpc://", "grpc+tcp://"))).build();
        FlightStream stream = client.getStream(ticket)) {
      StringBuilder theirs = new StringBuilder();
      while (stream.next()) theirs.append(stream.getRoot().contentToTSVString());
      assertTrue(ours.contains("[40,41,42,43]"), ours.substring(0, 200));
      assertEquals(theirs.toString(), ours);
    }
  }
}
