package io.wirespeed.flight;

import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;

import org.apache.arrow.c.ArrowArray;
import org.apache.arrow.c.ArrowArrayStream;
import org.apache.arrow.c.ArrowSchema;
import org.apache.arrow.c.CDataDictionaryProvider;
import org.apache.arrow.c.Data;
import org.apache.arrow.flight.CallStatus;
import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.vector.BaseFixedWidthVector;
import org.apache.arrow.vector.FieldVector;
import org.apache.arrow.vector.ipc.ArrowReader;
import org.apache.arrow.vector.ipc.message.ArrowFieldNode;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.arrow.vector.types.pojo.Schema;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT_UNALIGNED;
import static java.lang.foreign.ValueLayout.JAVA_LONG;
import static java.lang.foreign.ValueLayout.JAVA_LONG_UNALIGNED;

/**
 * An ArrowReader over one of the C library's ArrowArrayStreams that loads each batch's columns
 * where their buffers lie (the shm ring's blocks, or the library's heap), under one reference
 * count per batch ({@link BatchReference}). arrow-c-data's importer builds a StructVector, and an
 * AllocationManager and a ledger per buffer, for every batch: about 25 µs a batch
 * (bench/RESULTS.md). Schemas of flat fixed-width, boolean and (large) binary or string columns
 * take this path; in such a stream a batch with anything else (an offset, an unknown null count)
 * is imported by arrow-c-data, and a stream of any other schema is arrow-c-data's reader.
 */
final class CStreamReader extends ArrowReader {
  // struct ArrowArrayStream: get_schema, get_next, get_last_error, release, private_data.
  private static final long GET_SCHEMA = 0;
  private static final long GET_NEXT = 8;
  private static final long STREAM_RELEASE = 24;

  /** How one column's buffers are sized; null where a field does not load in place. */
  private enum Layout { FIXED, BIT, OFFSETS32, OFFSETS64 }

  private final Arena arena;
  private final MemorySegment stream;
  private final Schema schema;
  private final Layout[] layouts;
  /** Each fixed-width column's value width, from its vector on the first batch. */
  private int[] widths;
  private final CDataDictionaryProvider dictionaries = new CDataDictionaryProvider();

  private CStreamReader(BufferAllocator allocator, Arena arena, MemorySegment stream, Schema schema, Layout[] layouts) {
    super(allocator);
    this.arena = arena;
    this.stream = stream;
    this.schema = schema;
    this.layouts = layouts;
  }

  /**
   * A reader of the C stream at `stream`, which lives in `arena` and is moved out of it here:
   * this path where the schema allows it, else arrow-c-data's reader.
   */
  static ArrowReader open(BufferAllocator allocator, Arena arena, MemorySegment stream) {
    Schema schema;
    try (ArrowSchema c = ArrowSchema.allocateNew(allocator); CDataDictionaryProvider none = new CDataDictionaryProvider()) {
      check(stream, callback(stream, GET_SCHEMA, MemorySegment.ofAddress(c.memoryAddress())));
      schema = Data.importSchema(allocator, c, none);
    } catch (RuntimeException e) {
      release(stream);
      arena.close();
      throw e;
    }
    Layout[] layouts = new Layout[schema.getFields().size()];
    for (int i = 0; i < layouts.length; i++) {
      layouts[i] = layout(schema.getFields().get(i));
      if (layouts[i] == null) {
        ArrowReader theirs = Data.importArrayStream(allocator, ArrowArrayStream.wrap(stream.address()));
        arena.close();
        return theirs;
      }
    }
    return new CStreamReader(allocator, arena, stream, schema, layouts);
  }

  private static Layout layout(Field field) {
    if (field.getDictionary() != null || !field.getChildren().isEmpty()) {
      return null;
    }
    return switch (field.getType().getTypeID()) {
      case Bool -> Layout.BIT;
      case Int, FloatingPoint, Decimal, Date, Time, Timestamp, Interval, Duration, FixedSizeBinary -> Layout.FIXED;
      case Utf8, Binary -> Layout.OFFSETS32;
      case LargeUtf8, LargeBinary -> Layout.OFFSETS64;
      default -> null;
    };
  }

  @Override
  protected Schema readSchema() {
    return schema;
  }

  @Override
  public boolean loadNextBatch() throws IOException {
    prepareLoadNextBatch();
    MemorySegment array = BatchReference.slot();
    check(stream, callback(stream, GET_NEXT, array));
    if (array.get(ADDRESS, BatchReference.RELEASE).equals(MemorySegment.NULL)) {
      BatchReference.recycle(array);
      return false;
    }
    if (!loadInPlace(array)) {
      Data.importIntoVectorSchemaRoot(allocator, ArrowArray.wrap(array.address()), getVectorSchemaRoot(), dictionaries);
      BatchReference.recycle(array);
    }
    return true;
  }

  // struct ArrowArray: length, null_count, offset, n_buffers, n_children, buffers, children, dictionary, ...
  private static final long LENGTH = 0;
  private static final long NULL_COUNT = 8;
  private static final long OFFSET = 16;
  private static final long N_BUFFERS = 24;
  private static final long N_CHILDREN = 32;
  private static final long BUFFERS = 40;
  private static final long CHILDREN = 48;
  private static final long DICTIONARY = 56;

  /** Loads the batch in `array` where its buffers lie, or returns false, touching nothing, where it cannot. */
  private boolean loadInPlace(MemorySegment array) throws IOException {
    long rows = array.get(JAVA_LONG, LENGTH);
    if (array.get(JAVA_LONG, OFFSET) != 0 || rows > Integer.MAX_VALUE || array.get(JAVA_LONG, N_CHILDREN) != layouts.length) {
      return false;
    }
    MemorySegment children = array.get(ADDRESS, CHILDREN).reinterpret(layouts.length * ADDRESS.byteSize());
    MemorySegment[] columns = new MemorySegment[layouts.length];
    for (int i = 0; i < layouts.length; i++) {
      MemorySegment c = children.getAtIndex(ADDRESS, i).reinterpret(BatchReference.ARRAY_SIZE);
      long buffers = layouts[i] == Layout.OFFSETS32 || layouts[i] == Layout.OFFSETS64 ? 3 : 2;
      if (c.get(JAVA_LONG, LENGTH) != rows || c.get(JAVA_LONG, OFFSET) != 0 || c.get(JAVA_LONG, NULL_COUNT) < 0
          || c.get(JAVA_LONG, N_BUFFERS) != buffers || c.get(JAVA_LONG, N_CHILDREN) != 0
          || !c.get(ADDRESS, DICTIONARY).equals(MemorySegment.NULL)) {
        return false;
      }
      MemorySegment pointers = c.get(ADDRESS, BUFFERS).reinterpret(buffers * ADDRESS.byteSize());
      for (long b = 1; b < buffers; b++) {
        if (pointers.getAtIndex(ADDRESS, b).equals(MemorySegment.NULL)) {
          return false;
        }
      }
      columns[i] = c;
    }
    List<FieldVector> vectors = getVectorSchemaRoot().getFieldVectors();
    if (widths == null) {
      widths = new int[layouts.length];
      for (int i = 0; i < widths.length; i++) {
        widths[i] = layouts[i] == Layout.FIXED ? ((BaseFixedWidthVector) vectors.get(i)).getTypeWidth() : 0;
      }
    }
    BatchReference batch = new BatchReference(array, allocator);
    try (ArrowBuf ones = validityForAll(columns, (int) rows)) {
      long bits = (rows + 7) / 8;
      long next = 0;
      for (int i = 0; i < layouts.length; i++) {
        ArrowBuf validity = null;
        if (lacksValidity(columns[i])) {
          validity = ones == null ? allocator.getEmpty() : ones.slice(next++ * bits, bits);
        }
        load(vectors.get(i), i, (int) rows, columns[i], validity, batch);
      }
    } finally {
      batch.release();
    }
    getVectorSchemaRoot().setRowCount((int) rows);
    return true;
  }

  /**
   * One buffer of all-valid bits for every column of the batch that has no validity buffer (no
   * nulls), sliced per column: arrow-java would allocate one per column, and an allocation
   * costs more than the rest of a column's load. Null where no column needs one.
   */
  private ArrowBuf validityForAll(MemorySegment[] columns, int rows) {
    long bits = (rows + 7L) / 8;
    long need = 0;
    for (MemorySegment c : columns) {
      if (lacksValidity(c)) {
        need++;
      }
    }
    if (need == 0 || rows == 0) {
      return null;
    }
    ArrowBuf ones = allocator.buffer(need * bits);
    for (long i = 0; i < need; i++) {
      // As arrow-java's own: the bits past the last row are zero.
      ones.setOne(i * bits, rows / 8);
      if (rows % 8 != 0) {
        ones.setByte(i * bits + rows / 8, (byte) (0xFF >>> (8 - rows % 8)));
      }
    }
    return ones;
  }

  /** Whether a column's C array has no validity buffer (it has no nulls). */
  private static boolean lacksValidity(MemorySegment column) {
    return column.get(ADDRESS, BUFFERS).reinterpret(ADDRESS.byteSize()).get(ADDRESS, 0).equals(MemorySegment.NULL);
  }

  /** Loads one column; `validity` stands in for a validity buffer the C array lacks. */
  private void load(FieldVector vector, int column, int rows, MemorySegment c, ArrowBuf validity, BatchReference batch) {
    long nulls = c.get(JAVA_LONG, NULL_COUNT);
    long buffers = c.get(JAVA_LONG, N_BUFFERS);
    MemorySegment pointers = c.get(ADDRESS, BUFFERS).reinterpret(buffers * ADDRESS.byteSize());
    List<ArrowBuf> own = new ArrayList<>(3);
    long bits = (rows + 7L) / 8;
    own.add(validity != null ? validity : batch.buffer(pointers.getAtIndex(ADDRESS, 0).address(), bits));
    long second = pointers.getAtIndex(ADDRESS, 1).address();
    switch (layouts[column]) {
      case BIT -> own.add(batch.buffer(second, bits));
      case FIXED -> own.add(batch.buffer(second, (long) rows * widths[column]));
      case OFFSETS32, OFFSETS64 -> {
        long width = layouts[column] == Layout.OFFSETS32 ? 4 : 8;
        MemorySegment offsets = MemorySegment.ofAddress(second).reinterpret(width * (rows + 1L));
        long end = width == 4 ? offsets.get(JAVA_INT_UNALIGNED, 4L * rows) : offsets.get(JAVA_LONG_UNALIGNED, 8L * rows);
        own.add(batch.buffer(second, offsets.byteSize()));
        own.add(batch.buffer(pointers.getAtIndex(ADDRESS, 2).address(), end));
      }
    }
    vector.loadFieldBuffers(new ArrowFieldNode(rows, nulls), own);
  }

  @Override
  public long bytesRead() {
    return 0;
  }

  @Override
  protected void closeReadSource() {
    try {
      release(stream);
    } finally {
      dictionaries.close();
      arena.close();
    }
  }

  private static void release(MemorySegment stream) {
    Native.release(stream.get(ADDRESS, STREAM_RELEASE), stream);
  }

  /** Calls the stream's callback at `offset` (get_schema or get_next) with `out`. */
  private static int callback(MemorySegment stream, long offset, MemorySegment out) {
    try {
      return (int) Native.STREAM_CALLBACK.invokeExact(stream.get(ADDRESS, offset), stream, out);
    } catch (Throwable t) {
      throw new IllegalStateException("a stream callback failed", t);
    }
  }

  /** A failed get_schema or get_next: the stream's error as flight-core's exception, with its code. */
  private static void check(MemorySegment stream, int errno) {
    if (errno == 0) {
      return;
    }
    Calls.check(e -> (int) Native.STREAM_ERROR.invokeExact(stream, e));
    throw CallStatus.INTERNAL.withDescription("the stream failed with errno " + errno + " and no error").toRuntimeException();
  }
}
