package io.wirespeed.flight;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;

import org.apache.arrow.memory.ArrowBuf;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.OwnershipTransferResult;
import org.apache.arrow.memory.ReferenceManager;

import static java.lang.foreign.ValueLayout.ADDRESS;

/**
 * One reference count for all the buffers of one imported C batch (its ArrowArray): the vectors
 * that hold them retain it, and the last release calls the batch's release callback. The memory
 * is the C library's, so the allocator accounts none of it (arrow-c-data's importer does).
 */
final class BatchReference implements ReferenceManager {
  static final long ARRAY_SIZE = 80;
  static final long RELEASE = 64;

  /**
   * Spare ArrowArray structs. A batch's struct lives until its release, which may come after its
   * reader is closed, so structs come from the global arena and are reused; at most SPARE are kept.
   */
  private static final ConcurrentLinkedQueue<MemorySegment> SPARE_STRUCTS = new ConcurrentLinkedQueue<>();
  private static final AtomicInteger SPARES = new AtomicInteger();
  private static final int SPARE = 256;

  static MemorySegment slot() {
    MemorySegment s = SPARE_STRUCTS.poll();
    if (s == null) {
      return Arena.global().allocate(ARRAY_SIZE, 8);
    }
    SPARES.decrementAndGet();
    return s;
  }

  /** Returns a released (or never filled) struct for reuse. */
  static void recycle(MemorySegment array) {
    if (SPARES.incrementAndGet() <= SPARE) {
      array.set(ADDRESS, RELEASE, MemorySegment.NULL);
      SPARE_STRUCTS.add(array);
    } else {
      SPARES.decrementAndGet();
      // Beyond SPARE, the struct stays allocated: more batches than that were held at once.
    }
  }

  private final AtomicInteger count = new AtomicInteger(1);
  private final MemorySegment array;
  private final BufferAllocator allocator;

  /** Holds `array` (one reference, the importer's own, which it releases when done). */
  BatchReference(MemorySegment array, BufferAllocator allocator) {
    this.array = array;
    this.allocator = allocator;
  }

  /** A buffer of `len` bytes at `address`, in this batch, holding no reference of its own. */
  ArrowBuf buffer(long address, long len) {
    ArrowBuf buf = new ArrowBuf(this, null, len, address);
    buf.writerIndex(len);
    return buf;
  }

  @Override
  public int getRefCount() {
    return count.get();
  }

  @Override
  public boolean release() {
    return release(1);
  }

  @Override
  public boolean release(int decrement) {
    int left = count.addAndGet(-decrement);
    if (left < 0) {
      throw new IllegalStateException("an imported batch released more often than it was retained");
    }
    if (left > 0) {
      return false;
    }
    Native.release(array.get(ADDRESS, RELEASE), array);
    recycle(array);
    return true;
  }

  @Override
  public void retain() {
    retain(1);
  }

  @Override
  public void retain(int increment) {
    if (count.getAndAdd(increment) <= 0) {
      throw new IllegalStateException("an imported batch retained after its release");
    }
  }

  @Override
  public ArrowBuf retain(ArrowBuf source, BufferAllocator target) {
    retain();
    ArrowBuf buf = deriveBuffer(source, 0, source.capacity());
    buf.readerIndex(source.readerIndex());
    buf.writerIndex(source.writerIndex());
    return buf;
  }

  @Override
  public ArrowBuf deriveBuffer(ArrowBuf source, long index, long length) {
    return new ArrowBuf(this, null, length, source.memoryAddress() + index);
  }

  @Override
  public OwnershipTransferResult transferOwnership(ArrowBuf source, BufferAllocator target) {
    ArrowBuf moved = retain(source, target);
    return new OwnershipTransferResult() {
      @Override
      public boolean getAllocationFit() {
        return true;
      }

      @Override
      public ArrowBuf getTransferredBuffer() {
        return moved;
      }
    };
  }

  @Override
  public BufferAllocator getAllocator() {
    return allocator;
  }

  @Override
  public long getSize() {
    return 0;
  }

  @Override
  public long getAccountedSize() {
    return 0;
  }
}
