package mp

// SetReportOutput is setReportOutput, for the external tests.
var SetReportOutput = setReportOutput
