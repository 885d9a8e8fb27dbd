// wirespeed's Flight client and server for C++, header-only over the C library (wirespeed.h),
// shaped like arrow::flight::FlightClient and returning Arrow C++'s own types: batches come
// through arrow::ImportRecordBatchReader, over shared memory without a copy.
//
// Build against any Arrow C++ (pyarrow's wheel ships one: pyarrow.get_include(),
// pyarrow.get_library_dirs()) and link -larrow -larrow_flight -lwirespeed_c.
#pragma once

#include <arrow/c/bridge.h>
#include <arrow/flight/types.h>
#include <arrow/record_batch.h>
#include <arrow/result.h>
#include <arrow/status.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "../wirespeed.h"

namespace wirespeed::flight {

/// Options as (key, value) strings: see ws_client_connect and ws_server_serve_directory.
using Options = std::map<std::string, std::string>;

namespace detail {

/// A zeroed WsError that releases itself.
struct Error {
  WsError e{};
  Error() = default;
  Error(const Error&) = delete;
  Error& operator=(const Error&) = delete;
  ~Error() {
    if (e.release) e.release(&e);
  }
  WsError* get() { return &e; }
};

/// A failed call as the arrow::Status that arrow::flight gives for the same gRPC code.
inline arrow::Status ToStatus(WsStatus status, const WsError& e) {
  using arrow::flight::FlightStatusCode;
  std::string message = e.message ? e.message : "wirespeed: no message";
  std::string extra = e.extra_info ? std::string(reinterpret_cast<const char*>(e.extra_info), e.extra_info_len) : "";
  switch (status) {
    case WS_STATUS_OK:
      return arrow::Status::OK();
    case WS_STATUS_CANCELLED:
      return arrow::flight::MakeFlightError(FlightStatusCode::Cancelled, message, extra);
    case WS_STATUS_DEADLINE_EXCEEDED:
      return arrow::flight::MakeFlightError(FlightStatusCode::TimedOut, message, extra);
    case WS_STATUS_UNAUTHENTICATED:
      return arrow::flight::MakeFlightError(FlightStatusCode::Unauthenticated, message, extra);
    case WS_STATUS_PERMISSION_DENIED:
      return arrow::flight::MakeFlightError(FlightStatusCode::Unauthorized, message, extra);
    case WS_STATUS_UNAVAILABLE:
      return arrow::flight::MakeFlightError(FlightStatusCode::Unavailable, message, extra);
    case WS_STATUS_INVALID_ARGUMENT:
    case WS_STATUS_OUT_OF_RANGE:
      return arrow::Status::Invalid(message);
    case WS_STATUS_NOT_FOUND:
      return arrow::Status::KeyError(message);
    case WS_STATUS_ALREADY_EXISTS:
      return arrow::Status::AlreadyExists(message);
    case WS_STATUS_UNIMPLEMENTED:
      return arrow::Status::NotImplemented(message);
    case WS_STATUS_INTERNAL:
    case WS_STATUS_DATA_LOSS:
      return arrow::flight::MakeFlightError(FlightStatusCode::Internal, message, extra);
    default:
      return arrow::flight::MakeFlightError(FlightStatusCode::Failed, message, extra);
  }
}

/// Runs a C call that takes a WsError last; its failure as an arrow::Status.
template <typename Call>
arrow::Status Check(Call&& call) {
  Error error;
  WsStatus status = call(error.get());
  return ToStatus(status, error.e);
}

inline std::vector<WsOption> CArray(const Options& options) {
  std::vector<WsOption> out;
  for (const auto& [key, value] : options) out.push_back(WsOption{key.c_str(), value.c_str()});
  return out;
}

/// The byte runs of a WsBuffers, copied, and the WsBuffers released.
inline std::vector<std::string> Strings(WsBuffers& runs) {
  std::vector<std::string> out;
  for (size_t i = 0; i < runs.count; i++) out.emplace_back(reinterpret_cast<const char*>(runs.data[i]), runs.lens[i]);
  runs.release(&runs);
  return out;
}

/// A shared RecordBatchReader held by a unique one, as arrow::flight hands readers out.
class Reader final : public arrow::RecordBatchReader {
 public:
  explicit Reader(std::shared_ptr<arrow::RecordBatchReader> inner) : inner_(std::move(inner)) {}
  std::shared_ptr<arrow::Schema> schema() const override { return inner_->schema(); }
  arrow::Status ReadNext(std::shared_ptr<arrow::RecordBatch>* batch) override { return inner_->ReadNext(batch); }
  arrow::Status Close() override { return inner_->Close(); }

 private:
  std::shared_ptr<arrow::RecordBatchReader> inner_;
};

}  // namespace detail

/// A Flight client: any Flight server over gRPC, and a wirespeed server's data planes with its
/// key (option `key` or `key_file`). Safe to share between threads.
class Client {
 public:
  static arrow::Result<std::unique_ptr<Client>> Connect(const std::string& url, const Options& options = {}) {
    auto c_options = detail::CArray(options);
    WsClient* handle = nullptr;
    ARROW_RETURN_NOT_OK(detail::Check([&](WsError* e) {
      return ws_client_connect(url.c_str(), c_options.data(), c_options.size(), &handle, e);
    }));
    return std::unique_ptr<Client>(new Client(handle));
  }

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;
  ~Client() {
    WsError e{};
    ws_client_release(handle_, &e);
    if (e.release) e.release(&e);
  }

  arrow::Result<std::vector<std::unique_ptr<arrow::flight::FlightInfo>>> ListFlights(
      const std::string& criteria = "") {
    WsBuffers runs{};
    ARROW_RETURN_NOT_OK(detail::Check([&](WsError* e) {
      return ws_client_list_flights(handle_, reinterpret_cast<const uint8_t*>(criteria.data()), criteria.size(),
                                    &runs, e);
    }));
    std::vector<std::unique_ptr<arrow::flight::FlightInfo>> infos;
    for (const auto& bytes : detail::Strings(runs)) {
      ARROW_ASSIGN_OR_RAISE(auto info, arrow::flight::FlightInfo::Deserialize(bytes));
      infos.push_back(std::move(info));
    }
    return infos;
  }

  arrow::Result<std::unique_ptr<arrow::flight::FlightInfo>> GetFlightInfo(
      const arrow::flight::FlightDescriptor& descriptor) {
    ARROW_ASSIGN_OR_RAISE(auto d, descriptor.SerializeToString());
    WsBuffer info{};
    ARROW_RETURN_NOT_OK(detail::Check([&](WsError* e) {
      return ws_client_get_flight_info(handle_, reinterpret_cast<const uint8_t*>(d.data()), d.size(), &info, e);
    }));
    std::string bytes(reinterpret_cast<const char*>(info.data), info.len);
    info.release(&info);
    return arrow::flight::FlightInfo::Deserialize(bytes);
  }

  arrow::Result<std::shared_ptr<arrow::Schema>> GetSchema(const arrow::flight::FlightDescriptor& descriptor) {
    ARROW_ASSIGN_OR_RAISE(auto d, descriptor.SerializeToString());
    struct ArrowSchema schema{};
    ARROW_RETURN_NOT_OK(detail::Check([&](WsError* e) {
      return ws_client_get_schema(handle_, reinterpret_cast<const uint8_t*>(d.data()), d.size(), &schema, e);
    }));
    return arrow::ImportSchema(&schema);
  }

  /// The ticket's batches, over a data plane where one is offered and usable, else gRPC.
  /// `cancel` (may be null) cancels it from another thread.
  arrow::Result<std::unique_ptr<arrow::RecordBatchReader>> DoGet(const arrow::flight::Ticket& ticket,
                                                                 WsCancel* cancel = nullptr) {
    struct ArrowArrayStream stream{};
    ARROW_RETURN_NOT_OK(detail::Check([&](WsError* e) {
      return ws_client_do_get(handle_, reinterpret_cast<const uint8_t*>(ticket.ticket.data()), ticket.ticket.size(),
                              cancel, &stream, e);
    }));
    const char* plane = ws_stream_plane(&stream);
    {
      std::lock_guard<std::mutex> lock(plane_lock_);
      last_plane_ = plane ? plane : "";
    }
    ARROW_ASSIGN_OR_RAISE(auto reader, arrow::ImportRecordBatchReader(&stream));
    return std::make_unique<detail::Reader>(std::move(reader));
  }

  /// Uploads every batch of `reader` and returns the server's PutResults' app_metadata.
  arrow::Result<std::vector<std::string>> DoPut(const arrow::flight::FlightDescriptor& descriptor,
                                                std::shared_ptr<arrow::RecordBatchReader> reader,
                                                WsCancel* cancel = nullptr) {
    ARROW_ASSIGN_OR_RAISE(auto d, descriptor.SerializeToString());
    struct ArrowArrayStream stream{};
    ARROW_RETURN_NOT_OK(arrow::ExportRecordBatchReader(std::move(reader), &stream));
    WsBuffers results{};
    ARROW_RETURN_NOT_OK(detail::Check([&](WsError* e) {
      return ws_client_do_put(handle_, reinterpret_cast<const uint8_t*>(d.data()), d.size(), &stream, cancel,
                              &results, e);
    }));
    return detail::Strings(results);
  }

  arrow::Result<std::vector<std::string>> DoAction(const arrow::flight::Action& action) {
    const auto* body = action.body ? action.body->data() : nullptr;
    size_t len = action.body ? static_cast<size_t>(action.body->size()) : 0;
    WsBuffers results{};
    ARROW_RETURN_NOT_OK(detail::Check(
        [&](WsError* e) { return ws_client_do_action(handle_, action.type.c_str(), body, len, &results, e); }));
    return detail::Strings(results);
  }

  /// The plane the last DoGet took: "shm", "tcp", "ucx", "grpc", ...
  std::string last_plane() const {
    std::lock_guard<std::mutex> lock(plane_lock_);
    return last_plane_;
  }

 private:
  explicit Client(WsClient* handle) : handle_(handle) {}
  WsClient* handle_;
  mutable std::mutex plane_lock_;
  std::string last_plane_;
};

/// What a C++ service implements; any method left as is answers UNIMPLEMENTED. Called from
/// the server's threads, several at once.
class Service {
 public:
  virtual ~Service() = default;
  virtual arrow::Result<arrow::flight::FlightInfo> GetFlightInfo(const arrow::flight::FlightDescriptor&) {
    return arrow::Status::NotImplemented("GetFlightInfo");
  }
  virtual arrow::Result<std::shared_ptr<arrow::RecordBatchReader>> DoGet(const arrow::flight::Ticket&) {
    return arrow::Status::NotImplemented("DoGet");
  }
  /// Reads the upload from `reader`; an error from it means the upload failed.
  virtual arrow::Status DoPut(const arrow::flight::FlightDescriptor&, std::shared_ptr<arrow::RecordBatchReader>) {
    return arrow::Status::NotImplemented("DoPut");
  }
};

namespace detail {

/// An arrow::Status as a callback's WsStatus and error (the message freed by its release).
inline WsStatus Fail(const arrow::Status& status, WsError* error) {
  if (status.ok()) return WS_STATUS_OK;
  auto* message = new std::string(status.message());
  error->message = message->c_str();
  error->private_data = message;
  error->release = [](WsError* e) {
    delete static_cast<std::string*>(e->private_data);
    e->message = nullptr;
    e->private_data = nullptr;
    e->release = nullptr;
  };
  if (status.IsKeyError()) return WS_STATUS_NOT_FOUND;
  if (status.IsInvalid()) return WS_STATUS_INVALID_ARGUMENT;
  if (status.IsNotImplemented()) return WS_STATUS_UNIMPLEMENTED;
  if (status.IsAlreadyExists()) return WS_STATUS_ALREADY_EXISTS;
  if (auto detail = arrow::flight::FlightStatusDetail::UnwrapStatus(status)) {
    switch (detail->code()) {
      case arrow::flight::FlightStatusCode::Cancelled: return WS_STATUS_CANCELLED;
      case arrow::flight::FlightStatusCode::TimedOut: return WS_STATUS_DEADLINE_EXCEEDED;
      case arrow::flight::FlightStatusCode::Unauthenticated: return WS_STATUS_UNAUTHENTICATED;
      case arrow::flight::FlightStatusCode::Unauthorized: return WS_STATUS_PERMISSION_DENIED;
      case arrow::flight::FlightStatusCode::Unavailable: return WS_STATUS_UNAVAILABLE;
      default: break;
    }
  }
  return WS_STATUS_INTERNAL;
}

inline arrow::Result<arrow::flight::FlightDescriptor> Descriptor(const uint8_t* data, size_t len) {
  return arrow::flight::FlightDescriptor::Deserialize(std::string_view(reinterpret_cast<const char*>(data), len));
}

/// The C callbacks over a Service (user_data is a shared_ptr<Service>*).
inline WsHandler Trampolines(std::shared_ptr<Service> service) {
  WsHandler h{};
  h.user_data = new std::shared_ptr<Service>(std::move(service));
  h.get_flight_info = [](void* user_data, const uint8_t* d, size_t len, WsBuffer* out, WsError* error) -> int32_t {
    auto* service = static_cast<std::shared_ptr<Service>*>(user_data)->get();
    auto descriptor = Descriptor(d, len);
    if (!descriptor.ok()) return Fail(descriptor.status(), error);
    auto info = service->GetFlightInfo(*descriptor);
    if (!info.ok()) return Fail(info.status(), error);
    auto bytes = info->SerializeToString();
    if (!bytes.ok()) return Fail(bytes.status(), error);
    auto* held = new std::string(std::move(*bytes));
    *out = WsBuffer{reinterpret_cast<const uint8_t*>(held->data()), held->size(), held, [](WsBuffer* b) {
                      delete static_cast<std::string*>(b->private_data);
                      *b = WsBuffer{};
                    }};
    return WS_STATUS_OK;
  };
  h.do_get = [](void* user_data, const uint8_t* t, size_t len, struct ArrowArrayStream* out,
                 WsError* error) -> int32_t {
    auto* service = static_cast<std::shared_ptr<Service>*>(user_data)->get();
    arrow::flight::Ticket ticket{std::string(reinterpret_cast<const char*>(t), len)};
    auto reader = service->DoGet(ticket);
    if (!reader.ok()) return Fail(reader.status(), error);
    return Fail(arrow::ExportRecordBatchReader(*reader, out), error);
  };
  h.do_put = [](void* user_data, const uint8_t* d, size_t len, struct ArrowArrayStream* in,
                 WsError* error) -> int32_t {
    auto* service = static_cast<std::shared_ptr<Service>*>(user_data)->get();
    auto reader = arrow::ImportRecordBatchReader(in);
    if (!reader.ok()) return Fail(reader.status(), error);
    auto descriptor = Descriptor(d, len);
    if (!descriptor.ok()) return Fail(descriptor.status(), error);
    return Fail(service->DoPut(*descriptor, *reader), error);
  };
  h.release = [](void* user_data) { delete static_cast<std::shared_ptr<Service>*>(user_data); };
  return h;
}

}  // namespace detail

/// A running server: a directory as `wirespeed serve` serves it, or a Service.
class Server {
 public:
  static arrow::Result<std::unique_ptr<Server>> ServeDirectory(const std::string& root, const std::string& listen,
                                                               const Options& options = {}) {
    auto c_options = detail::CArray(options);
    WsServer* handle = nullptr;
    ARROW_RETURN_NOT_OK(detail::Check([&](WsError* e) {
      return ws_server_serve_directory(root.c_str(), listen.c_str(), c_options.data(), c_options.size(), &handle, e);
    }));
    return std::unique_ptr<Server>(new Server(handle));
  }

  static arrow::Result<std::unique_ptr<Server>> Serve(std::shared_ptr<Service> service, const std::string& listen,
                                                      const Options& options = {}) {
    auto c_options = detail::CArray(options);
    WsHandler handler = detail::Trampolines(std::move(service));
    WsServer* handle = nullptr;
    ARROW_RETURN_NOT_OK(detail::Check([&](WsError* e) {
      return ws_server_serve_callbacks(&handler, listen.c_str(), c_options.data(), c_options.size(), &handle, e);
    }));
    return std::unique_ptr<Server>(new Server(handle));
  }

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server() { Shutdown(0).ok(); }

  arrow::Result<uint16_t> port() const {
    uint16_t port = 0;
    ARROW_RETURN_NOT_OK(detail::Check([&](WsError* e) { return ws_server_port(handle_, &port, e); }));
    return port;
  }

  /// Stops, draining first for up to `deadline_seconds`.
  arrow::Status Shutdown(double deadline_seconds) {
    if (!handle_) return arrow::Status::OK();
    WsServer* handle = std::exchange(handle_, nullptr);
    return detail::Check([&](WsError* e) { return ws_server_shutdown(handle, deadline_seconds, nullptr, e); });
  }

 private:
  explicit Server(WsServer* handle) : handle_(handle) {}
  WsServer* handle_;
};

}  // namespace wirespeed::flight
