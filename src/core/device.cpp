// Device parsing and printing.
#include "tapegrad/core/device.h"

#include <cctype>

#include "tapegrad/core/error.h"

namespace tapegrad {

Device::Device(DeviceKind kind, int index) : kind_(kind), index_(index) {
  TG_CHECK(index >= 0, "Device: index must be >= 0, got ", index);
  TG_CHECK(kind != DeviceKind::CPU || index == 0, "Device: the cpu device has only index 0, got ", index);
}

Device::Device(const std::string& spec) : kind_(DeviceKind::CPU), index_(0) {
  std::string name = spec;
  std::string index_text;
  size_t colon = spec.find(':');
  if (colon != std::string::npos) {
    name = spec.substr(0, colon);
    index_text = spec.substr(colon + 1);
    bool digits = !index_text.empty() && index_text.size() <= 6;
    for (char c : index_text) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    TG_CHECK(digits, "Device: invalid device string '", spec, "' (expected cpu, cuda or cuda:N)");
  }
  if (name == "cpu") {
    kind_ = DeviceKind::CPU;
  } else if (name == "cuda") {
    kind_ = DeviceKind::CUDA;
  } else {
    TG_CHECK(false, "Device: invalid device string '", spec, "' (expected cpu, cuda or cuda:N)");
  }
  if (!index_text.empty()) index_ = std::stoi(index_text);
  TG_CHECK(kind_ != DeviceKind::CPU || index_ == 0, "Device: the cpu device has only index 0, got '", spec, "'");
}

const char* device_kind_name(DeviceKind kind) {
  return kind == DeviceKind::CPU ? "cpu" : "cuda";
}

std::string Device::str() const {
  if (kind_ == DeviceKind::CPU) return "cpu";
  return std::string("cuda:") + std::to_string(index_);
}

std::ostream& operator<<(std::ostream& out, const Device& device) {
  return out << device.str();
}

}  // namespace tapegrad
