// The JSON form of the Diagnostics protos (see report_json.h).
#include "proto/render/report_json.h"

#include "google/protobuf/util/json_util.h"
#include "nlohmann/json.hpp"

namespace saturn {

std::string ProtoJson(const google::protobuf::Message& m, bool pretty) {
  google::protobuf::util::JsonPrintOptions o;
  o.add_whitespace = pretty;
  o.always_print_primitive_fields = true;
  o.preserve_proto_field_names = true;
  std::string out;
  if (!google::protobuf::util::MessageToJsonString(m, &out, o).ok()) return "{}";
  return out;
}

std::string ReportJson(const v1::DiagnosticsReport& r, bool pretty) {
  v1::DiagnosticsReport lean = r;
  lean.clear_json();
  lean.clear_recording_json();
  // The printer writes every field; `json` (an empty string now) is dropped after, the other
  // fields kept in the printer's order (the .proto's).
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(ProtoJson(lean, false), nullptr, false);
  if (!j.is_object()) return "{}";
  j.erase("json");
  j.erase("recordingJson");
  return j.dump(pretty ? 2 : -1);
}

}  // namespace saturn
