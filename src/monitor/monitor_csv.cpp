// defines: CsvMonitor (DeepSpeed's csv_monitor files) and python_float_text.
#include "monitor/monitor_csv.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>

namespace dsrt {

std::string python_float_text(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // The shortest digits that read back as the same double, laid out as Python's repr does:
  // positional for decimal exponents -4..15, else d.ddde+XX with at least two exponent digits.
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::scientific);
  std::string text(buffer, result.ptr);
  std::string sign;
  if (!text.empty() && text[0] == '-') {
    sign = "-";
    text.erase(0, 1);
  }
  const size_t e = text.find('e');
  const int exponent = std::atoi(text.c_str() + e + 1);
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (text[i] != '.') digits += text[i];
  const int count = static_cast<int>(digits.size());
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) return sign + "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    const int whole = exponent + 1;
    if (count <= whole) return sign + digits + std::string(static_cast<size_t>(whole - count), '0') + ".0";
    return sign + digits.substr(0, static_cast<size_t>(whole)) + "." + digits.substr(static_cast<size_t>(whole));
  }
  std::string out = sign + digits.substr(0, 1);
  if (count > 1) out += "." + digits.substr(1);
  char exp_text[16];
  std::snprintf(exp_text, sizeof exp_text, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp_text;
}

Status CsvMonitor::open(const std::string &output_path, const std::string &job_name, CsvMonitor *out) {
  namespace fs = std::filesystem;
  const fs::path folder = fs::path(output_path) / fs::path(job_name);
  std::error_code error;
  fs::create_directories(folder, error);
  if (error || !fs::is_directory(folder))
    return Error(DSRT_ERR_IO,
                 "csv_monitor: cannot create the folder '%s' (output_path '%s', job_name '%s'): %s; set "
                 "csv_monitor.output_path to a writable folder",
                 folder.string().c_str(), output_path.c_str(), job_name.c_str(),
                 error ? error.message().c_str() : "a file of that name exists");
  out->folder_ = folder.string();
  out->headed_.clear();
  return Status::Ok();
}

Status CsvMonitor::write(const std::vector<MonitorEvent> &events) {
  Status first;
  for (const MonitorEvent &event : events) {
    std::string file = event.name;
    for (char &c : file)
      if (c == '/' || c == ' ') c = '_';
    const size_t slash = event.name.rfind('/');
    const std::string header = slash == std::string::npos ? event.name : event.name.substr(slash + 1);
    const std::string path = (std::filesystem::path(folder_) / (file + ".csv")).string();
    std::string rows;
    const bool new_header = headed_.count(file) == 0;
    if (new_header) rows += "step," + header + "\r\n";
    rows += std::to_string(event.step) + "," + python_float_text(event.value) + "\r\n";
    std::unique_ptr<FILE, int (*)(FILE *)> f(std::fopen(path.c_str(), "ab"), &std::fclose);
    bool written = f && std::fwrite(rows.data(), 1, rows.size(), f.get()) == rows.size();
    int saved_errno = errno;
    if (f) {
      written = std::fclose(f.release()) == 0 && written;
      if (!written && saved_errno == 0) saved_errno = errno;
    }
    if (!written) {
      if (first.ok())
        first = Error(DSRT_ERR_IO, "csv_monitor: cannot append to '%s': %s", path.c_str(), std::strerror(saved_errno));
      continue;
    }
    if (new_header) headed_.insert(file);
  }
  return first;
}

}  // namespace dsrt
