// monitor_csv.h -- DeepSpeed's csv_monitor: one CSV file per event under output_path/job_name.
//
// The layout is DeepSpeed's, so scripts and notebooks that read its files read these: the event
// "Train/Samples/train_loss" goes to <output_path>/<job_name>/Train_Samples_train_loss.csv ('/'
// and ' ' in the name become '_'), opened for appending; the first time this monitor writes a
// file it writes the header row "step,<last part of the name>", then one row "step,value" per
// event. Rows end in "\r\n" and numbers are written as Python writes them (shortest round-trip
// digits, "0.001", "65536.0", "1e-05"), as DeepSpeed's csv.writer does.
#pragma once

#include <set>
#include <string>

#include "monitor/monitor_events.h"
#include "util/status.h"

namespace dsrt {

// Python's repr() of a float (the text DeepSpeed's CSV rows hold).
std::string python_float_text(double value);

class CsvMonitor {
 public:
  // The folder is output_path joined with job_name, as os.path.join does (an absolute job_name
  // wins, an empty output_path gives job_name relative to the working directory). Creates it;
  // DSRT_ERR_IO naming the folder and errno when it cannot.
  static Status open(const std::string &output_path, const std::string &job_name, CsvMonitor *out);
  const std::string &folder() const { return folder_; }
  // Appends every event to its file. DSRT_ERR_IO names the file on the first failure (the
  // remaining events are still tried).
  Status write(const std::vector<MonitorEvent> &events);

 private:
  std::string folder_;
  std::set<std::string> headed_;  // files this monitor has written a header into
};

}  // namespace dsrt
