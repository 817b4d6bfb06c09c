# hardware/: requirement-parser fuzzing and the fake sysfs fixture.
.PHONY: fuzz-hardware hardware-testdata

## fuzz-hardware: fuzz the capability requirement parser (FUZZTIME=30s).
FUZZTIME ?= 30s
fuzz-hardware:
	$(GO) test -run '^$$' -fuzz FuzzParseRequirement -fuzztime $(FUZZTIME) ./hardware

## hardware-testdata: regenerate the fake sysfs tree and recorded tool outputs.
hardware-testdata:
	sh hardware/testdata/mksys.sh
	cd hardware/testdata/tools && python3 gen_fixtures.py
