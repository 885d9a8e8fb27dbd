// wirespeed/flight.hpp from C++, built against the Arrow C++ that pyarrow's wheel ships
// (tests/interop/test_cpp.py builds and drives it).
//
//   flight_test read URL KEYFILE NAME   reads flight NAME with wirespeed (over a data plane)
//                                       and with arrow::flight::FlightClient (gRPC); says
//                                       whether the tables are equal
//   flight_test serve KEYFILE           serves a table of its own from a C++ Service until
//                                       stdin closes; says "port N"
//   flight_test bench URL KEYFILE TICKET wirespeed|arrow TIMES
//                                       reads TICKET TIMES times with one client, each timed
//                                       (bench/languages.sh)
#include <arrow/api.h>
#include <arrow/flight/client.h>

#include <chrono>
#include <iostream>

#include "wirespeed/flight.hpp"

namespace flight = arrow::flight;

#define OR_DIE(expr)                                           \
  ({                                                           \
    auto result_ = (expr);                                     \
    if (!result_.ok()) {                                       \
      std::cerr << #expr << ": " << result_.status() << "\n";  \
      std::exit(1);                                            \
    }                                                          \
    std::move(result_).ValueUnsafe();                          \
  })

static int Read(const std::string& url, const std::string& keyfile, const std::string& name) {
  auto ours = OR_DIE(wirespeed::flight::Client::Connect(url, {{"key_file", keyfile}, {"transport", "auto"}}));
  auto descriptor = flight::FlightDescriptor::Path({name});
  auto info = OR_DIE(ours->GetFlightInfo(descriptor));
  auto reader = OR_DIE(ours->DoGet(info->endpoints()[0].ticket));
  auto table = OR_DIE(reader->ToTable());
  std::string plane = ours->last_plane();

  auto location = OR_DIE(flight::Location::Parse(url));
  auto theirs = OR_DIE(flight::FlightClient::Connect(location));
  auto stream = OR_DIE(theirs->DoGet(info->endpoints()[0].ticket));
  auto expected = OR_DIE(stream->ToTable());

  auto schema = OR_DIE(ours->GetSchema(descriptor));
  auto missing = ours->DoGet(flight::Ticket{"no-such-flight.arrow"});
  std::cout << "plane " << plane << " rows " << table->num_rows() << " equal "
            << (table->Equals(*expected) ? "yes" : "no") << " schema " << (schema->Equals(*table->schema()) ? "yes" : "no")
            << " missing " << (missing.status().IsKeyError() ? "KeyError" : missing.status().ToString()) << "\n";
  return 0;
}

/// One table: 100,000 rows of an int64 and a string column.
static std::shared_ptr<arrow::Table> MakeTable() {
  arrow::Int64Builder numbers;
  arrow::StringBuilder words;
  for (int64_t i = 0; i < 100000; i++) {
    if (!numbers.Append(i * 3).ok() || !words.Append("row " + std::to_string(i)).ok()) std::exit(1);
  }
  auto schema = arrow::schema({arrow::field("n", arrow::int64()), arrow::field("word", arrow::utf8())});
  std::shared_ptr<arrow::Array> a, b;
  if (!numbers.Finish(&a).ok() || !words.Finish(&b).ok()) std::exit(1);
  return OR_DIE(arrow::Table::Make(schema, {a, b})->CombineChunks());
}

class TableService : public wirespeed::flight::Service {
 public:
  arrow::Result<flight::FlightInfo> GetFlightInfo(const flight::FlightDescriptor& descriptor) override {
    if (descriptor.path != std::vector<std::string>{"cpp-table"}) return arrow::Status::KeyError("no such flight");
    flight::FlightEndpoint endpoint{flight::Ticket{"cpp-table"}, {}, std::nullopt, ""};
    return flight::FlightInfo::Make(*table_->schema(), descriptor, {endpoint}, table_->num_rows(), -1);
  }
  arrow::Result<std::shared_ptr<arrow::RecordBatchReader>> DoGet(const flight::Ticket& ticket) override {
    if (ticket.ticket != "cpp-table") return arrow::Status::KeyError("no such ticket: ", ticket.ticket);
    return std::make_shared<arrow::TableBatchReader>(table_);
  }

 private:
  std::shared_ptr<arrow::Table> table_ = MakeTable();
};

static int Serve(const std::string& keyfile) {
  auto server = OR_DIE(
      wirespeed::flight::Server::Serve(std::make_shared<TableService>(), "127.0.0.1:0", {{"key_file", keyfile}}));
  std::cout << "port " << OR_DIE(server->port()) << std::endl;
  std::string line;
  while (std::getline(std::cin, line)) {
  }
  auto stopped = server->Shutdown(1.0);
  if (!stopped.ok()) std::cerr << stopped << "\n";
  return stopped.ok() ? 0 : 1;
}

/// Reads `ticket` `times` times with wirespeed's client or arrow::flight's, each read timed.
static int Bench(const std::string& url, const std::string& keyfile, const std::string& ticket,
                 const std::string& which, int times) {
  std::unique_ptr<wirespeed::flight::Client> ours;
  std::unique_ptr<flight::FlightClient> theirs;
  if (which == "wirespeed") {
    ours = OR_DIE(wirespeed::flight::Client::Connect(url, {{"key_file", keyfile}}));
  } else {
    theirs = OR_DIE(flight::FlightClient::Connect(OR_DIE(flight::Location::Parse(url))));
  }
  for (int i = 0; i < times; i++) {
    auto start = std::chrono::steady_clock::now();
    int64_t rows = 0;
    std::string plane = "grpc";
    if (ours) {
      auto reader = OR_DIE(ours->DoGet(flight::Ticket{ticket}));
      plane = ours->last_plane();
      for (std::shared_ptr<arrow::RecordBatch> batch; (batch = OR_DIE(reader->Next()));) rows += batch->num_rows();
    } else {
      auto stream = OR_DIE(theirs->DoGet(flight::Ticket{ticket}));
      for (flight::FlightStreamChunk chunk; (chunk = OR_DIE(stream->Next())).data;) rows += chunk.data->num_rows();
    }
    std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    std::cout << "plane " << plane << " rows " << rows << " seconds " << took.count() << std::endl;
  }
  return 0;
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 4 && args[0] == "read") return Read(args[1], args[2], args[3]);
  if (args.size() == 2 && args[0] == "serve") return Serve(args[1]);
  if (args.size() == 6 && args[0] == "bench") return Bench(args[1], args[2], args[3], args[4], std::stoi(args[5]));
  std::cerr << "usage: flight_test read URL KEYFILE NAME | serve KEYFILE\n";
  return 2;
}
