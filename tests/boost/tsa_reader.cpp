// Reads a FLESnet timeslice archive (.tsa) with Boost.Serialization, using the class layouts
// and serialize() functions of FLESnet's lib/fles_ipc, and checks every microslice's CRC-32C.
// Prints the archive's descriptor, one line per timeslice, and a last line
// "ok TIMESLICES COMPONENTS MICROSLICES"; exits non-zero on any error.
// Build: g++ -O2 -o tsa_reader tsa_reader.cpp -lboost_serialization
#include <boost/archive/binary_iarchive.hpp>
#include <boost/serialization/string.hpp>
#include <boost/serialization/vector.hpp>
#include <boost/serialization/version.hpp>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
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

static uint32_t crc32c(const uint8_t* p, size_t n) {
  static uint32_t table[256];
  if (table[1] == 0) {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      table[i] = c;
    }
  }
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xFF] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tsa_reader FILE.tsa\n";
    return 2;
  }
  std::ifstream in(argv[1], std::ios::binary);
  if (!in) {
    std::cerr << "cannot open " << argv[1] << "\n";
    return 1;
  }
  try {
    boost::archive::binary_iarchive ia(in);
    fles::ArchiveDescriptor ad;
    ia >> ad;
    std::cout << "archive type " << ad.archive_type << " compression " << ad.archive_compression << " host "
              << ad.hostname << " user " << ad.username << "\n";
    uint64_t timeslices = 0, components = 0, microslices = 0;
    while (in.peek() != EOF) {
      fles::StorableTimeslice ts;
      ia >> ts;
      const auto& d = ts.timeslice_descriptor;
      if (ts.data.size() != d.num_components || ts.desc.size() != d.num_components) {
        std::cerr << "timeslice " << d.index << ": component counts disagree\n";
        return 1;
      }
      for (size_t c = 0; c < ts.data.size(); ++c) {
        const auto& bytes = ts.data[c];
        const auto& cd = ts.desc[c];
        size_t n = cd.num_microslices;
        if (bytes.size() != cd.size || bytes.size() < n * sizeof(fles::MicrosliceDescriptor)) {
          std::cerr << "timeslice " << d.index << " component " << c << ": sizes disagree\n";
          return 1;
        }
        fles::MicrosliceDescriptor first;
        std::memcpy(&first, bytes.data(), sizeof first);
        for (size_t m = 0; m < n; ++m) {
          fles::MicrosliceDescriptor md;
          std::memcpy(&md, bytes.data() + m * sizeof md, sizeof md);
          size_t at = n * sizeof md + (md.offset - first.offset);
          if (md.hdr_id != 0xDD || at + md.size > bytes.size()) {
            std::cerr << "timeslice " << d.index << " component " << c << " microslice " << m << ": bad descriptor\n";
            return 1;
          }
          if ((md.flags & 1) && crc32c(bytes.data() + at, md.size) != md.crc) {
            std::cerr << "timeslice " << d.index << " component " << c << " microslice " << m << ": CRC mismatch\n";
            return 1;
          }
        }
        microslices += n;
      }
      std::cout << "timeslice " << d.index << " components " << d.num_components << " core "
                << d.num_core_microslices << "\n";
      ++timeslices;
      components += d.num_components;
    }
    std::cout << "ok " << timeslices << " " << components << " " << microslices << "\n";
  } catch (const std::exception& e) {
    std::cerr << "reading " << argv[1] << ": " << e.what() << "\n";
    return 1;
  }
  return 0;
}
