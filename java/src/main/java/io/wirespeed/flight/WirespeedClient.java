package io.wirespeed.flight;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Map;

import org.apache.arrow.c.ArrowArrayStream;
import org.apache.arrow.c.Data;
import org.apache.arrow.flight.FlightDescriptor;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.Ticket;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.ipc.ArrowReader;

import static java.lang.foreign.ValueLayout.ADDRESS;

/**
 * A Flight client shaped like flight-core's FlightClient ({@link #getStream}, {@link #getInfo},
 * {@link #put}), over the C library: a wirespeed server's data planes with its key (shared
 * memory on one host), gRPC otherwise. Safe to share between threads.
 */
public final class WirespeedClient implements AutoCloseable {
  private final BufferAllocator allocator;
  private final MemorySegment handle;

  private WirespeedClient(BufferAllocator allocator, MemorySegment handle) {
    this.allocator = allocator;
    this.handle = handle;
  }

  /** The C library's version. */
  public static String version() {
    try {
      return ((MemorySegment) Native.VERSION.invokeExact()).reinterpret(64).getString(0);
    } catch (Throwable t) {
      throw new IllegalStateException(t);
    }
  }

  /**
   * Connects to grpc://host:port, grpc+tls://host:port or grpc+unix://PATH with ws_client_connect's
   * options: "key_file" or "key" (the data planes'), "transport", "tls_roots", "username" and
   * "password", "header.NAME", "timeout", ...
   */
  public static WirespeedClient connect(BufferAllocator allocator, String url, Map<String, String> options) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment out = arena.allocate(ADDRESS);
      MemorySegment list = Calls.options(arena, options);
      MemorySegment curl = arena.allocateFrom(url);
      Calls.check(e -> (int) Native.CONNECT.invokeExact(curl, list, (long) options.size(), out, e));
      return new WirespeedClient(allocator, out.get(ADDRESS, 0));
    }
  }

  /** GetFlightInfo, decoded by flight-core. */
  public FlightInfo getInfo(FlightDescriptor descriptor) {
    try (Arena arena = Arena.ofConfined()) {
      byte[] d = toBytes(descriptor.serialize());
      MemorySegment raw = Calls.bytes(arena, d);
      MemorySegment info = arena.allocate(Native.BUFFER);
      Calls.check(e -> (int) Native.GET_FLIGHT_INFO.invokeExact(handle, raw, (long) d.length, info, e));
      return FlightInfo.deserialize(ByteBuffer.wrap(Calls.take(info)));
    } catch (java.io.IOException | java.net.URISyntaxException e) {
      throw new IllegalStateException("a FlightInfo that does not decode", e);
    }
  }

  /** The plane the last getStream took: "shm", "tcp", "ucx", "grpc", ... */
  public String lastPlane() {
    return lastPlane;
  }

  private volatile String lastPlane = "";

  /**
   * DoGet: the ticket's batches, loaded where they lie (over shm, in the ring's blocks, held
   * until the vectors let go of them); `cancel` (may be null) cancels the call from another
   * thread. A stream that fails is flight-core's FlightRuntimeException with the call's code.
   */
  public ArrowReader getStream(Ticket ticket, Cancel cancel) {
    byte[] t = ticket.getBytes();
    // The stream's struct lives as long as its reader, which may outlive this thread's call.
    Arena streamArena = Arena.ofShared();
    MemorySegment stream = streamArena.allocate(Native.STREAM_SIZE, 8);
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment raw = Calls.bytes(arena, t);
      MemorySegment token = cancel == null ? MemorySegment.NULL : cancel.handle;
      Calls.check(e -> (int) Native.DO_GET.invokeExact(handle, raw, (long) t.length, token, stream, e));
    } catch (RuntimeException | Error e) {
      streamArena.close();
      throw e;
    }
    lastPlane = plane(stream);
    return CStreamReader.open(allocator, streamArena, stream);
  }

  private static String plane(MemorySegment stream) {
    try {
      MemorySegment plane = (MemorySegment) Native.STREAM_PLANE.invokeExact(stream);
      return plane.equals(MemorySegment.NULL) ? "" : plane.reinterpret(64).getString(0);
    } catch (Throwable t) {
      throw new IllegalStateException(t);
    }
  }

  public ArrowReader getStream(Ticket ticket) {
    return getStream(ticket, null);
  }

  /** DoPut: uploads every batch of `reader` and returns the server's PutResults' app_metadata. */
  public List<byte[]> put(FlightDescriptor descriptor, ArrowReader reader) {
    byte[] d = toBytes(descriptor.serialize());
    try (Arena arena = Arena.ofConfined(); ArrowArrayStream stream = ArrowArrayStream.allocateNew(allocator)) {
      Data.exportArrayStream(allocator, reader, stream);
      MemorySegment raw = Calls.bytes(arena, d);
      MemorySegment in = MemorySegment.ofAddress(stream.memoryAddress());
      MemorySegment results = arena.allocate(Native.BUFFERS);
      Calls.check(e -> (int) Native.DO_PUT.invokeExact(handle, raw, (long) d.length, in, MemorySegment.NULL, results, e));
      return Calls.takeAll(results);
    }
  }

  /** Releases the client; readers it opened stay readable. */
  @Override
  public void close() {
    Calls.check(e -> (int) Native.RELEASE_CLIENT.invokeExact(handle, e));
  }

  private static byte[] toBytes(ByteBuffer buffer) {
    byte[] out = new byte[buffer.remaining()];
    buffer.get(out);
    return out;
  }

  /** A cancellation token: pass it to calls, {@link #trigger} it from any thread. */
  public static final class Cancel implements AutoCloseable {
    final MemorySegment handle;

    public Cancel() {
      try (Arena arena = Arena.ofConfined()) {
        MemorySegment out = arena.allocate(ADDRESS);
        Calls.check(e -> (int) Native.CANCEL_NEW.invokeExact(out, e));
        handle = out.get(ADDRESS, 0);
      }
    }

    public void trigger() {
      Calls.check(e -> (int) Native.CANCEL_TRIGGER.invokeExact(handle, e));
    }

    @Override
    public void close() {
      Calls.check(e -> (int) Native.CANCEL_RELEASE.invokeExact(handle, e));
    }
  }
}
