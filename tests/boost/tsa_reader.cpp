// Reads a FLESnet timeslice archive (.tsa) with Boost.Serialization, using the class layouts
// and serialize() functions of FLESnet's lib/fles_ipc, and checks every microslice's CRC-32C.
// A compressed archive (compression 1) is read as FLESnet's InputArchive reads it: the rest of
// the file through Boost.Iostreams' zstd decompressor, as an archive without a header.
// Prints the archive's descriptor, one line per timeslice, and a last line
// "ok TIMESLICES COMPONENTS MICROSLICES"; exits non-zero on any error.
// Build: g++ -O2 -o tsa_reader tsa_reader.cpp -lboost_serialization -lboost_iostreams
#include "fles_classes.hpp"

#include <boost/archive/binary_iarchive.hpp>
#include <boost/iostreams/filter/zstd.hpp>
#include <boost/iostreams/filtering_stream.hpp>
#include <fstream>
#include <iostream>
#include <memory>

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
    std::istream* body = &in;
    boost::archive::binary_iarchive* archive = &ia;
    boost::iostreams::filtering_istream unzstd;
    std::unique_ptr<boost::archive::binary_iarchive> inner;
    if (ad.archive_compression == 1) {
      unzstd.push(boost::iostreams::zstd_decompressor());
      unzstd.push(in);
      inner = std::make_unique<boost::archive::binary_iarchive>(unzstd, boost::archive::no_header);
      body = &unzstd;
      archive = inner.get();
    } else if (ad.archive_compression != 0) {
      std::cerr << "unknown compression " << ad.archive_compression << "\n";
      return 1;
    }
    while (body->peek() != EOF) {
      fles::StorableTimeslice ts;
      *archive >> ts;
      const auto& d = ts.timeslice_descriptor;
      if (ts.data.size() != d.num_components || ts.desc.size() != d.num_components) {
        std::cerr << "timeslice " << d.index << ": component counts disagree\n";
        return 1;
      }
      for (size_t c = 0; c < ts.data.size(); ++c) {
        const auto& bytes = ts.data[c];
        const auto& cd = ts.desc[c];
        size_t n = cd.num_microslices;
        std::string wrong = bytes.size() == cd.size ? check_component(bytes.data(), bytes.size(), n) : "sizes disagree";
        if (!wrong.empty()) {
          std::cerr << "timeslice " << d.index << " component " << c << ": " << wrong << "\n";
          return 1;
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
