// module LoftIO
