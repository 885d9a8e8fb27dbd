// A consumer of FLESnet's shared-memory interface, written from its protocol (as
// fles::TimesliceReceiver and ItemWorker behave) with libzmq, Boost.Serialization and
// Boost.Interprocess: it registers at ipc://@NAME with a REQ socket, takes each WORK_ITEM (a
// TimesliceShmWorkItem archive), opens the named segment read-only, checks its UUID and every
// microslice's CRC-32C where the item's handles point, and completes it; it answers
// heartbeats, and gives up after 10 s without word from the node.
//
// Prints "timeslice INDEX components N" per timeslice and at the end (DISCONNECT END)
// "ok TIMESLICES COMPONENTS MICROSLICES"; exits non-zero on any error or a silent node.
// --die-after K exits at once after taking K items (holding the last); --stall-after K
// holds the K-th item and stops answering.
// Build: g++ -O2 -o shm_consumer shm_consumer.cpp -lboost_serialization -lzmq -lrt
#include "fles_classes.hpp"

#include <boost/archive/binary_iarchive.hpp>
#include <boost/interprocess/managed_shared_memory.hpp>
#include <boost/uuid/uuid.hpp>
#include <boost/uuid/uuid_serialize.hpp>
#include <chrono>
#include <iostream>
#include <memory>
#include <sstream>
#include <thread>
#include <unistd.h>
#include <zmq.h>

namespace fles {
#pragma pack(1)
struct TimesliceShmWorkItem {
  boost::uuids::uuid shm_uuid;
  std::string shm_identifier;
  TimesliceDescriptor ts_desc{};
  std::vector<std::ptrdiff_t> data;
  std::vector<std::ptrdiff_t> desc;
  std::vector<TimesliceComponentDescriptor> tsc_desc;
  template <class Archive> void serialize(Archive& ar, const unsigned int version) {
    ar & shm_uuid;
    ar & shm_identifier;
    ar & ts_desc;
    ar & data;
    ar & desc;
    if (version > 0) ar & tsc_desc;
  }
};
#pragma pack()
} // namespace fles
BOOST_CLASS_VERSION(fles::TimesliceShmWorkItem, 1)

namespace bip = boost::interprocess;

static void send(void* sock, const std::string& text) {
  if (zmq_send(sock, text.data(), text.size(), 0) < 0) throw std::runtime_error(std::string("send: ") + zmq_strerror(zmq_errno()));
}

// One message's parts, or an empty vector after `timeout_ms` of silence.
static std::vector<std::string> receive(void* sock, int timeout_ms) {
  zmq_pollitem_t item{sock, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, timeout_ms) <= 0) return {};
  std::vector<std::string> parts;
  int more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, sock, 0) < 0) throw std::runtime_error(std::string("recv: ") + zmq_strerror(zmq_errno()));
    parts.emplace_back(static_cast<char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  return parts;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: shm_consumer NAME [--stride S --offset O] [--die-after K] [--stall-after K]\n";
    return 2;
  }
  std::string name = argv[1];
  long stride = 1, offset = 0, die_after = -1, stall_after = -1;
  for (int i = 2; i + 1 < argc; i += 2) {
    std::string flag = argv[i];
    long value = std::stol(argv[i + 1]);
    if (flag == "--stride") stride = value;
    else if (flag == "--offset") offset = value;
    else if (flag == "--die-after") die_after = value;
    else if (flag == "--stall-after") stall_after = value;
  }
  void* ctx = zmq_ctx_new();
  void* sock = zmq_socket(ctx, ZMQ_REQ);
  int linger = 0;
  zmq_setsockopt(sock, ZMQ_LINGER, &linger, sizeof linger);
  if (zmq_connect(sock, ("ipc://@" + name).c_str()) != 0) {
    std::cerr << "connect: " << zmq_strerror(zmq_errno()) << "\n";
    return 1;
  }
  std::unique_ptr<bip::managed_shared_memory> shm;
  boost::uuids::uuid shm_uuid{};
  uint64_t timeslices = 0, components = 0, microslices = 0;
  try {
    send(sock, "REGISTER " + std::to_string(stride) + " " + std::to_string(offset) + " 0 0 shm_consumer");
    auto last_word = std::chrono::steady_clock::now();
    for (;;) {
      auto parts = receive(sock, 500);
      if (parts.empty()) {
        if (std::chrono::steady_clock::now() - last_word > std::chrono::seconds(10)) {
          std::cerr << "no word from the node for 10 s\n";
          return 1;
        }
        continue;
      }
      last_word = std::chrono::steady_clock::now();
      const std::string& text = parts[0];
      if (text == "HEARTBEAT") {
        send(sock, "HEARTBEAT");
      } else if (text == "DISCONNECT END") {
        std::cout << "ok " << timeslices << " " << components << " " << microslices << std::endl;
        return 0;
      } else if (text.rfind("WORK_ITEM ", 0) == 0 && parts.size() == 2) {
        fles::TimesliceShmWorkItem item;
        {
          std::istringstream in(parts[1]);
          boost::archive::binary_iarchive ia(in);
          ia >> item;
        }
        if (!shm || shm_uuid != item.shm_uuid) {
          shm = std::make_unique<bip::managed_shared_memory>(bip::open_read_only, item.shm_identifier.c_str());
          auto* id = shm->find<boost::uuids::uuid>(bip::unique_instance).first;
          if (id == nullptr || *id != item.shm_uuid) {
            std::cerr << "segment " << item.shm_identifier << ": UUID mismatch\n";
            return 1;
          }
          shm_uuid = *id;
        }
        const auto& d = item.ts_desc;
        if (item.data.size() != d.num_components || item.tsc_desc.size() != d.num_components) {
          std::cerr << "timeslice " << d.index << ": component counts disagree\n";
          return 1;
        }
        for (size_t c = 0; c < d.num_components; ++c) {
          const auto& cd = item.tsc_desc[c];
          if (item.data[c] < 0 || item.data[c] + cd.size > shm->get_size()) {
            std::cerr << "timeslice " << d.index << " component " << c << ": outside the segment\n";
            return 1;
          }
          auto* bytes = static_cast<const uint8_t*>(shm->get_address_from_handle(item.data[c]));
          std::string wrong = check_component(bytes, cd.size, cd.num_microslices);
          if (!wrong.empty() || cd.ts_num != d.index) {
            std::cerr << "timeslice " << d.index << " component " << c << ": " << (wrong.empty() ? "ts_num" : wrong) << "\n";
            return 1;
          }
          microslices += cd.num_microslices;
        }
        std::cout << "timeslice " << d.index << " components " << d.num_components << std::endl;
        ++timeslices;
        components += d.num_components;
        if (static_cast<long>(timeslices) == die_after) _exit(3);
        if (static_cast<long>(timeslices) == stall_after) {
          for (;;) std::this_thread::sleep_for(std::chrono::seconds(60));
        }
        send(sock, "COMPLETE " + text.substr(10));
      } else {
        std::cerr << "unexpected message: " << text << "\n";
        return 1;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "shm_consumer: " << e.what() << "\n";
    return 1;
  }
}
