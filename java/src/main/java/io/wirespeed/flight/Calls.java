package io.wirespeed.flight;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.apache.arrow.flight.CallStatus;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

/** How a C call is made: its error struct, its failure as flight-core's exception, its arguments. */
final class Calls {
  private Calls() {}

  /** A C call that takes a WsError last and returns a WsStatus. */
  @FunctionalInterface
  interface Call {
    int run(MemorySegment error) throws Throwable;
  }

  /** Runs `call`; a failure becomes the FlightRuntimeException flight-core raises for that gRPC code. */
  static void check(Call call) {
    try (Arena arena = Arena.ofConfined()) {
      MemorySegment error = arena.allocate(Native.ERROR);
      int status;
      try {
        status = call.run(error);
      } catch (RuntimeException | Error e) {
        throw e;
      } catch (Throwable t) {
        throw new IllegalStateException(t);
      }
      if (status == 0) {
        return;
      }
      MemorySegment message = (MemorySegment) Native.ERROR_MESSAGE.get(error, 0L);
      String text = message.equals(MemorySegment.NULL) ? "wirespeed: no message" : message.reinterpret(Long.MAX_VALUE).getString(0);
      Native.release((MemorySegment) Native.ERROR_RELEASE.get(error, 0L), error);
      throw status(status).withDescription(text).toRuntimeException();
    }
  }

  /** flight-core's status for a gRPC code, as its gRPC client maps them. */
  static CallStatus status(int code) {
    return switch (code) {
      case 1 -> CallStatus.CANCELLED;
      case 3, 11 -> CallStatus.INVALID_ARGUMENT;
      case 4 -> CallStatus.TIMED_OUT;
      case 5 -> CallStatus.NOT_FOUND;
      case 6 -> CallStatus.ALREADY_EXISTS;
      case 7 -> CallStatus.UNAUTHORIZED;
      case 8 -> CallStatus.RESOURCE_EXHAUSTED;
      case 12 -> CallStatus.UNIMPLEMENTED;
      case 13, 15 -> CallStatus.INTERNAL;
      case 14 -> CallStatus.UNAVAILABLE;
      case 16 -> CallStatus.UNAUTHENTICATED;
      default -> CallStatus.UNKNOWN;
    };
  }

  /** Options as a C array of WsOption, in `arena`. */
  static MemorySegment options(Arena arena, Map<String, String> options) {
    MemorySegment list = arena.allocate(Native.OPTION, Math.max(1, options.size()));
    long i = 0;
    for (Map.Entry<String, String> o : options.entrySet()) {
      MemorySegment slot = list.asSlice(i++ * Native.OPTION.byteSize(), Native.OPTION.byteSize());
      slot.set(ADDRESS, 0, arena.allocateFrom(o.getKey()));
      slot.set(ADDRESS, ADDRESS.byteSize(), arena.allocateFrom(o.getValue()));
    }
    return list;
  }

  static MemorySegment bytes(Arena arena, byte[] bytes) {
    return bytes.length == 0 ? MemorySegment.NULL : arena.allocateFrom(JAVA_BYTE, bytes);
  }

  /** The bytes of a filled WsBuffer, which is then released. */
  static byte[] take(MemorySegment buffer) {
    MemorySegment data = (MemorySegment) Native.BUFFER_DATA.get(buffer, 0L);
    long len = (long) Native.BUFFER_LEN.get(buffer, 0L);
    byte[] out = len == 0 ? new byte[0] : data.reinterpret(len).toArray(JAVA_BYTE);
    Native.release((MemorySegment) Native.BUFFER_RELEASE.get(buffer, 0L), buffer);
    return out;
  }

  /** The runs of a filled WsBuffers, which is then released. */
  static List<byte[]> takeAll(MemorySegment runs) {
    long count = (long) Native.BUFFERS_COUNT.get(runs, 0L);
    MemorySegment data = ((MemorySegment) Native.BUFFERS_DATA.get(runs, 0L)).reinterpret(count * ADDRESS.byteSize());
    MemorySegment lens = ((MemorySegment) Native.BUFFERS_LENS.get(runs, 0L)).reinterpret(count * JAVA_LONG.byteSize());
    List<byte[]> out = new ArrayList<>();
    for (long i = 0; i < count; i++) {
      long len = lens.getAtIndex(JAVA_LONG, i);
      MemorySegment run = data.getAtIndex(ADDRESS, i);
      out.add(len == 0 ? new byte[0] : run.reinterpret(len).toArray(JAVA_BYTE));
    }
    Native.release((MemorySegment) Native.BUFFERS_RELEASE.get(runs, 0L), runs);
    return out;
  }

}
