package io.wirespeed.flight;

import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.Linker;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.foreign.SymbolLookup;
import java.lang.invoke.MethodHandle;
import java.lang.invoke.VarHandle;
import java.nio.file.Path;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_DOUBLE;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

/** The C library's calls and structs (wirespeed.h), bound once through the FFM API. */
final class Native {
  private Native() {}

  /** The library: the system property wirespeed.library names it, else libwirespeed_c.so on the library path. */
  static final SymbolLookup LIBRARY = lookup();

  private static SymbolLookup lookup() {
    String path = System.getProperty("wirespeed.library");
    return path != null
        ? SymbolLookup.libraryLookup(Path.of(path), Arena.global())
        : SymbolLookup.libraryLookup(System.mapLibraryName("wirespeed_c"), Arena.global());
  }

  static final StructLayout ERROR = MemoryLayout.structLayout(
      JAVA_INT.withName("code"), MemoryLayout.paddingLayout(4), ADDRESS.withName("message"),
      ADDRESS.withName("extra_info"), JAVA_LONG.withName("extra_info_len"), ADDRESS.withName("private_data"),
      ADDRESS.withName("release"));
  static final StructLayout OPTION = MemoryLayout.structLayout(ADDRESS.withName("key"), ADDRESS.withName("value"));
  static final StructLayout BUFFER = MemoryLayout.structLayout(
      ADDRESS.withName("data"), JAVA_LONG.withName("len"), ADDRESS.withName("private_data"), ADDRESS.withName("release"));
  static final StructLayout BUFFERS = MemoryLayout.structLayout(
      JAVA_LONG.withName("count"), ADDRESS.withName("data"), ADDRESS.withName("lens"), ADDRESS.withName("private_data"),
      ADDRESS.withName("release"));
  /** struct ArrowArrayStream: four callbacks and private data. */
  static final long STREAM_SIZE = 5 * ADDRESS.byteSize();

  static final VarHandle ERROR_MESSAGE = ERROR.varHandle(MemoryLayout.PathElement.groupElement("message"));
  static final VarHandle ERROR_RELEASE = ERROR.varHandle(MemoryLayout.PathElement.groupElement("release"));
  static final VarHandle BUFFER_DATA = BUFFER.varHandle(MemoryLayout.PathElement.groupElement("data"));
  static final VarHandle BUFFER_LEN = BUFFER.varHandle(MemoryLayout.PathElement.groupElement("len"));
  static final VarHandle BUFFER_RELEASE = BUFFER.varHandle(MemoryLayout.PathElement.groupElement("release"));
  static final VarHandle BUFFERS_COUNT = BUFFERS.varHandle(MemoryLayout.PathElement.groupElement("count"));
  static final VarHandle BUFFERS_DATA = BUFFERS.varHandle(MemoryLayout.PathElement.groupElement("data"));
  static final VarHandle BUFFERS_LENS = BUFFERS.varHandle(MemoryLayout.PathElement.groupElement("lens"));
  static final VarHandle BUFFERS_RELEASE = BUFFERS.varHandle(MemoryLayout.PathElement.groupElement("release"));

  private static MethodHandle bind(String name, FunctionDescriptor signature) {
    MemorySegment symbol = LIBRARY.find(name).orElseThrow(() -> new UnsatisfiedLinkError(name + " is not in the wirespeed library"));
    return Linker.nativeLinker().downcallHandle(symbol, signature);
  }

  static final MethodHandle VERSION = bind("ws_version", FunctionDescriptor.of(ADDRESS));
  static final MethodHandle CONNECT = bind("ws_client_connect", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS));
  static final MethodHandle RELEASE_CLIENT = bind("ws_client_release", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
  static final MethodHandle LIST_FLIGHTS = bind("ws_client_list_flights", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS));
  static final MethodHandle GET_FLIGHT_INFO = bind("ws_client_get_flight_info", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS));
  static final MethodHandle DO_GET = bind("ws_client_do_get", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS, ADDRESS));
  static final MethodHandle DO_PUT = bind("ws_client_do_put", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS, ADDRESS, ADDRESS));
  static final MethodHandle STREAM_PLANE = bind("ws_stream_plane", FunctionDescriptor.of(ADDRESS, ADDRESS));
  static final MethodHandle STREAM_ERROR = bind("ws_stream_error", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
  static final MethodHandle CANCEL_NEW = bind("ws_cancel_new", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
  static final MethodHandle CANCEL_TRIGGER = bind("ws_cancel_trigger", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
  static final MethodHandle CANCEL_RELEASE = bind("ws_cancel_release", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
  static final MethodHandle SERVE_DIRECTORY = bind("ws_server_serve_directory", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS));
  static final MethodHandle SERVER_PORT = bind("ws_server_port", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
  static final MethodHandle SERVER_SHUTDOWN = bind("ws_server_shutdown", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_DOUBLE, ADDRESS, ADDRESS));

  /** Calls a stream's get_schema or get_next, int (*)(stream*, out*): its address first, then its arguments. */
  static final MethodHandle STREAM_CALLBACK = Linker.nativeLinker().downcallHandle(FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));

  /** Calls a function pointer of type void (*)(void*): its address first, then its argument. */
  private static final MethodHandle CALL_RELEASE = Linker.nativeLinker().downcallHandle(FunctionDescriptor.ofVoid(ADDRESS));

  /** Calls a release callback at `release` with the struct it belongs to. */
  static void release(MemorySegment release, MemorySegment struct) {
    if (release.equals(MemorySegment.NULL)) {
      return;
    }
    try {
      CALL_RELEASE.invokeExact(release, struct);
    } catch (Throwable t) {
      throw new IllegalStateException("a release callback failed", t);
    }
  }
}
