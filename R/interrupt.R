# Raised by the C glue (gk_raise() in src/r_util.c) after a core stopped for a
# Ctrl-C and the glue freed what it held. The core's check consumed R's
# pending interrupt, so R's own handling is redone here: signal R's interrupt
# condition (tryCatch(interrupt = ) and withCallingHandlers see it; try(),
# which catches errors only, does not), then jump to the top level as R does.
gk_signal_interrupt <- function() {
  signalCondition(structure(list(), class = c("interrupt", "condition")))
  invokeRestart("abort")
}
