// FLESnet's consumers find a compute node's timeslices in a Boost.Interprocess managed
// shared-memory segment, identified by a UUID stored in it as a unique instance. This is the
// part of that interface only Boost can do (its segment layout is Boost's own); Rust calls it
// through the C functions below. Errors come back as a message, never as an exception.
#include <boost/interprocess/managed_shared_memory.hpp>
#include <boost/interprocess/permissions.hpp>
#include <boost/uuid/random_generator.hpp>
#include <boost/uuid/uuid.hpp>

#include <cstring>
#include <exception>
#include <new>
#include <string>

namespace bip = boost::interprocess;

struct ws_segment {
  bip::managed_shared_memory shm;
};

namespace {

void report(const std::exception& e, char* err, size_t err_len) {
  if (err_len > 0) {
    std::strncpy(err, e.what(), err_len - 1);
    err[err_len - 1] = '\0';
  }
}

void copy_uuid(const boost::uuids::uuid& id, unsigned char out[16]) {
  std::memcpy(out, id.data, 16);
}

} // namespace

extern "C" {

// Creates segment `name` of `size` bytes, readable and writable by this user only (removing a
// stale one of the same name first), with a new random UUID stored in it.
ws_segment* ws_segment_create(const char* name, size_t size, unsigned char uuid[16], char* err,
                              size_t err_len) {
  try {
    bip::shared_memory_object::remove(name);
    bip::permissions owner_only(0600);
    auto* s = new ws_segment{bip::managed_shared_memory(bip::create_only, name, size, nullptr, owner_only)};
    boost::uuids::random_generator generate;
    auto* id = s->shm.construct<boost::uuids::uuid>(bip::unique_instance)(generate());
    copy_uuid(*id, uuid);
    return s;
  } catch (const std::exception& e) {
    report(e, err, err_len);
    return nullptr;
  }
}

// Opens segment `name` read-only, as FLESnet's receiver does, and gives its UUID.
ws_segment* ws_segment_open_read_only(const char* name, unsigned char uuid[16], char* err, size_t err_len) {
  try {
    auto* s = new ws_segment{bip::managed_shared_memory(bip::open_read_only, name)};
    auto* id = s->shm.find<boost::uuids::uuid>(bip::unique_instance).first;
    if (id == nullptr) {
      delete s;
      throw std::runtime_error("the segment holds no UUID");
    }
    copy_uuid(*id, uuid);
    return s;
  } catch (const std::exception& e) {
    report(e, err, err_len);
    return nullptr;
  }
}

// `size` bytes inside the segment, aligned to `align` (a power of two), or NULL.
void* ws_segment_allocate(ws_segment* s, size_t size, size_t align, char* err, size_t err_len) {
  try {
    return s->shm.allocate_aligned(size, align);
  } catch (const std::exception& e) {
    report(e, err, err_len);
    return nullptr;
  }
}

void ws_segment_deallocate(ws_segment* s, void* p) { s->shm.deallocate(p); }

// Where the segment is mapped: handles are offsets from here (and offsets in its file).
void* ws_segment_base(ws_segment* s) { return s->shm.get_address(); }

size_t ws_segment_size(ws_segment* s) { return s->shm.get_size(); }

void ws_segment_close(ws_segment* s) { delete s; }

// Removes segment `name`'s name; mappings stay valid until closed.
int ws_segment_remove(const char* name) { return bip::shared_memory_object::remove(name) ? 0 : -1; }
}
