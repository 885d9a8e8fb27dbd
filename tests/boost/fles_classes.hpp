// FLESnet's classes as Boost.Serialization stores them (the layouts and serialize() functions
// of FLESnet's lib/fles_ipc, written from its formats), and the CRC-32C its microslices carry.
// Shared by the test programs beside this file.
#pragma once
#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>
#include <boost/serialization/version.hpp>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

namespace fles {

struct ArchiveDescriptor {
  int32_t archive_type = -1;
  int32_t archive_compression = -1;
  std::time_t time_created = 0;
  std::string hostname;
  std::string username;
  template <class Archive> void serialize(Archive& ar, const unsigned int version) {
    if (version > 0) ar & archive_type;
    if (version > 1) ar & archive_compression;
    ar & time_created;
    ar & hostname;
    ar & username;
  }
};

#pragma pack(1)
struct MicrosliceDescriptor {
  uint8_t hdr_id;
  uint8_t hdr_ver;
  uint16_t eq_id;
  uint16_t flags;
  uint8_t sys_id;
  uint8_t sys_ver;
  uint64_t idx;
  uint32_t crc;
  uint32_t size;
  uint64_t offset;
};
#pragma pack()
static_assert(sizeof(MicrosliceDescriptor) == 32, "FLESnet's descriptor is 32 bytes");

struct TimesliceComponentDescriptor {
  uint64_t ts_num = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t num_microslices = 0;
  uint32_t flags = 0;
  template <class Archive> void serialize(Archive& ar, const unsigned int version) {
    ar & ts_num;
    ar & offset;
    ar & size;
    ar & num_microslices;
    if (version >= 1) ar & flags;
  }
};

struct TimesliceDescriptor {
  uint64_t index = 0;
  uint64_t start_time = 0;
  uint64_t duration = 0;
  uint32_t flags = 0;
  uint64_t ts_pos = 0;
  uint32_t num_core_microslices = 0;
  uint32_t num_components = 0;
  template <class Archive> void serialize(Archive& ar, const unsigned int version) {
    if (version > 0) ar & index;
    if (version > 1) {
      ar & start_time;
      ar & duration;
      ar & flags;
    }
    ar & ts_pos;
    ar & num_core_microslices;
    ar & num_components;
  }
};

struct StorableTimeslice {
  TimesliceDescriptor timeslice_descriptor;
  std::vector<std::vector<uint8_t>> data;
  std::vector<TimesliceComponentDescriptor> desc;
  template <class Archive> void serialize(Archive& ar, const unsigned int) {
    ar & timeslice_descriptor;
    ar & data;
    ar & desc;
  }
};

} // namespace fles

BOOST_CLASS_VERSION(fles::ArchiveDescriptor, 2)
BOOST_CLASS_VERSION(fles::TimesliceComponentDescriptor, 1)
BOOST_CLASS_VERSION(fles::TimesliceDescriptor, 2)

// CRC-32C with the CPU's crc32 instruction (SSE 4.2, on every x86-64 CPU since 2008), 8 bytes
// at a time, as FLESnet's consumers compute it.
__attribute__((target("sse4.2"))) static uint32_t crc32c(const uint8_t* p, size_t n) {
  uint64_t c = 0xFFFFFFFFu;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  for (; n > 0; --n, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32 ^ 0xFFFFFFFFu;
}

// Checks a component (its microslice descriptors, then their contents) of `size` bytes holding
// `n` microslices: every descriptor in bounds, every CRC that is marked valid right. Returns
// an empty string, or what is wrong.
static std::string check_component(const uint8_t* bytes, size_t size, size_t n) {
  if (size < n * sizeof(fles::MicrosliceDescriptor)) return "sizes disagree";
  fles::MicrosliceDescriptor first;
  if (n > 0) std::memcpy(&first, bytes, sizeof first);
  for (size_t m = 0; m < n; ++m) {
    fles::MicrosliceDescriptor md;
    std::memcpy(&md, bytes + m * sizeof md, sizeof md);
    size_t at = n * sizeof md + (md.offset - first.offset);
    if (md.hdr_id != 0xDD || md.offset < first.offset || at + md.size > size)
      return "microslice " + std::to_string(m) + ": bad descriptor";
    if ((md.flags & 1) && crc32c(bytes + at, md.size) != md.crc)
      return "microslice " + std::to_string(m) + ": CRC mismatch";
  }
  return "";
}
